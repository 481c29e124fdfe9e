"""Small helpers of Lasagne's ``lasagne.utils``: floatX arrays, tuples, expressions, one-hot codes.

Example
-------
>>> import numpy as np, pytensor
>>> from theanompi.models.layers import utils
>>> utils.floatX([1, 2]).dtype == np.dtype(pytensor.config.floatX)
True
>>> utils.as_tuple(3, 2), utils.unique([1, 2, 1, 3])
((3, 3), [1, 2, 3])
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

__all__ = ["as_expression", "as_tuple", "floatX", "one_hot", "shared_empty", "unique"]


def floatX(arr):
    """``arr`` as a numpy array of ``pytensor.config.floatX`` (a copy only where the dtype changes).

    Example
    -------
    >>> floatX(0.5).dtype == np.dtype(pytensor.config.floatX)
    True
    """
    return np.asarray(arr, dtype=pytensor.config.floatX)


def as_tuple(x, N, t=None):
    """``x`` repeated ``N`` times, or ``tuple(x)`` if ``x`` is iterable (then of length ``N``, items of type ``t``).

    Raises
    ------
    ValueError
        For an iterable of another length, or items that are not instances of ``t``.

    Example
    -------
    >>> as_tuple((1, 2), 2, int), as_tuple("ab", 1)
    ((1, 2), ('ab',))
    """
    if isinstance(x, (str, bytes)):
        x = (x,) * N
    else:
        try:
            x = tuple(x)
        except TypeError:
            x = (x,) * N
    if len(x) != N:
        raise ValueError(f"expected a single value or an iterable of length {N}, got {x!r}")
    if t is not None and not all(isinstance(v, t) for v in x):
        names = t.__name__ if isinstance(t, type) else " or ".join(c.__name__ for c in t)
        raise ValueError(f"expected a single {names} or an iterable of {N} of them, got {x!r}")
    return x


def as_expression(value):
    """``value`` as a pytensor expression: variables as they are, arrays as constants (float arrays in floatX).

    Raises
    ------
    ValueError
        For a value pytensor cannot turn into a tensor.

    Example
    -------
    >>> as_expression(np.ones(3)).dtype == pytensor.config.floatX
    True
    """
    if isinstance(value, Variable):
        return value
    try:
        array = np.asarray(value)
        if array.dtype.kind == "f":
            array = array.astype(pytensor.config.floatX)
        return pt.constant(array)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot turn {type(value).__name__} {value!r:.100} into a pytensor expression: {exc}") \
            from None


def shared_empty(dim=2, dtype=None):
    """A shared variable holding an empty (all sizes 0) array of ``dim`` dimensions (default dtype floatX).

    Example
    -------
    >>> shared_empty(3).get_value().shape
    (0, 0, 0)
    """
    return pytensor.shared(np.zeros((0,) * dim, dtype=dtype or pytensor.config.floatX))


def one_hot(x, m=None):
    """One-hot rows (floatX) of the int vector expression ``x`` over ``m`` classes (default ``max(x) + 1``).

    Example
    -------
    >>> one_hot(pt.as_tensor_variable(np.array([0, 2])), 3).eval().tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    x = pt.as_tensor_variable(x)
    if m is None:
        m = pt.max(x) + 1
    return pt.eq(x[:, None], pt.arange(m)[None, :]).astype(pytensor.config.floatX)


def unique(items):
    """The items of ``items`` without repetitions, in order of first appearance.

    Example
    -------
    >>> unique("abcab")
    ['a', 'b', 'c']
    """
    seen, result = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            result.append(item)
    return result
