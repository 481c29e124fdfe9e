"""Small helpers of Lasagne's ``lasagne.utils``: floatX arrays, tuples, expressions, one-hot codes.

Example
-------
>>> import numpy as np, pytensor
>>> from theanompi.nn import utils
>>> utils.floatX([1, 2]).dtype == np.dtype(pytensor.config.floatX)
True
>>> utils.as_tuple(3, 2), utils.unique([1, 2, 1, 3])
((3, 3), [1, 2, 3])
"""

from __future__ import annotations

import inspect
import numbers

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable

__all__ = [
    "as_expression", "as_tuple", "collect_shared_vars", "compute_norms", "floatX", "inspect_kwargs", "int_types",
    "one_hot", "shared_empty", "unique", "unroll_scan",
]

#: The int-like types (Python and numpy ints) for ``isinstance`` checks.
int_types = (numbers.Integral, np.integer)


def floatX(arr):
    """``arr`` as a numpy array of ``pytensor.config.floatX`` (a copy only where the dtype changes).

    Example
    -------
    >>> floatX(0.5).dtype == np.dtype(pytensor.config.floatX)
    True
    """
    return np.asarray(arr, dtype=pytensor.config.floatX)


def _type_names(t) -> str:
    if t == int_types:
        return "int"
    if isinstance(t, tuple):
        return " or ".join(c.__name__ for c in t)
    return t.__name__


def as_tuple(x, N, t=None):
    """``x`` repeated ``N`` times, or ``tuple(x)`` if ``x`` is iterable (then of length ``N``, items of type ``t``).

    Raises
    ------
    TypeError
        For items that are not instances of ``t``.
    ValueError
        For an iterable of another length.

    Example
    -------
    >>> as_tuple((1, 2), 2, int), as_tuple(3, 2)
    ((1, 2), (3, 3))
    """
    try:
        values = tuple(x)
    except TypeError:
        values = (x,) * N
    if t is not None and not all(isinstance(v, t) for v in values):
        raise TypeError(f"expected a single value or an iterable of {_type_names(t)}, got {x!r} instead")
    if len(values) != N:
        raise ValueError(f"expected a single value or an iterable with length {N}, got {x!r} instead")
    return values


def as_expression(value):
    """``value`` as a pytensor expression: variables as they are, anything else as a constant.

    Raises
    ------
    TypeError
        For a value pytensor cannot turn into a constant.

    Example
    -------
    >>> as_expression(np.ones(3)).ndim
    1
    """
    if isinstance(value, Variable):
        return value
    try:
        return pt.constant(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot turn {type(value).__name__} {value!r:.100} into a pytensor expression: {exc}") \
            from None


def collect_shared_vars(expressions):
    """The shared variables that ``expressions`` (one or a list) depend on, depth first, left to right, once each.

    Example
    -------
    >>> x, y = pytensor.shared(1.0, name="x"), pytensor.shared(2.0, name="y")
    >>> [v.name for v in collect_shared_vars([y * 2, x + y])]
    ['y', 'x']
    """
    if isinstance(expressions, Variable):
        expressions = [expressions]
    stack, seen, found = list(reversed(list(expressions))), set(), []
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if isinstance(var, SharedVariable):
            found.append(var)
        elif var.owner is not None:
            stack.extend(reversed(var.owner.inputs))
    return found


def inspect_kwargs(func):
    """The names of ``func``'s parameters that have a default value, in order.

    Example
    -------
    >>> inspect_kwargs(lambda a, b=1, *args, c=2, **kw: 0)
    ['b', 'c']
    """
    params = inspect.signature(func).parameters.values()
    return [p.name for p in params if p.default is not inspect.Parameter.empty]


def _default_norm_axes(ndim):
    """The axes :func:`compute_norms` sums over for a tensor of ``ndim`` dimensions (weights' input axes)."""
    if ndim == 1:
        return ()
    if ndim == 2:
        return (0,)
    if ndim in (3, 4, 5):
        return tuple(range(1, ndim))
    raise ValueError(f"compute_norms: Unsupported tensor dimensionality {ndim}; give norm_axes")


def compute_norms(array, norm_axes=None):
    """L2 norms of ``array`` (a numpy array or a pytensor expression) over ``norm_axes``.

    By default the input axes of a weight tensor: none for 1-D (absolute
    values), axis 0 of a dense ``W``, all but axis 0 of a convolution's filters.

    Example
    -------
    >>> compute_norms(np.array([[3.0, 0.0], [4.0, 1.0]])).tolist()
    [5.0, 1.0]
    """
    if not isinstance(array, (Variable, np.ndarray)):
        raise RuntimeError(f"compute_norms: Unsupported type {type(array).__name__}; give a pytensor expression "
                           "or a numpy array")
    axes = _default_norm_axes(array.ndim) if norm_axes is None else tuple(norm_axes)
    if isinstance(array, Variable):
        return pt.abs(array) if not axes else pt.sqrt(pt.sum(pt.square(array), axis=axes))
    return np.abs(array) if not axes else np.sqrt(np.sum(np.square(array), axis=axes))


def shared_empty(dim=2, dtype=None):
    """A shared variable holding zeros of shape ``(1,) * dim`` (default dtype floatX), a placeholder to fill later.

    Example
    -------
    >>> shared_empty(3).get_value().shape
    (1, 1, 1)
    """
    return pytensor.shared(np.zeros((1,) * dim, dtype=dtype or pytensor.config.floatX))


def one_hot(x, m=None):
    """One-hot rows (floatX) of the int expression ``x`` over ``m`` classes (default ``max(x) + 1``).

    Example
    -------
    >>> one_hot(pt.as_tensor_variable(np.array([0, 2])), 3).eval().tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    x = pt.as_tensor_variable(x)
    if m is None:
        m = pt.max(x) + 1
    return pt.eq(x[..., None], pt.arange(m)).astype(pytensor.config.floatX)


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


def unroll_scan(fn, sequences, outputs_info, non_sequences, n_steps, go_backwards=False):
    """``pytensor.scan`` unrolled into ``n_steps`` copies of ``fn``: one output list per recurrent output.

    ``fn(*sequence_slices, *previous_outputs, *non_sequences)`` returns one
    expression or a list; each output is stacked over the steps (time first, in
    the order of the steps taken: reversed with ``go_backwards``).

    Example
    -------
    >>> a = pt.scalar("a")
    >>> [powers] = unroll_scan(lambda t, prev, a: prev * a, pt.arange(3), [pt.constant(1.0)], [a], 3)
    >>> powers.eval({a: 2.0}).tolist()
    [2.0, 4.0, 8.0]
    """
    if not isinstance(sequences, (list, tuple)):
        sequences = [sequences]
    steps = range(n_steps - 1, -1, -1) if go_backwards else range(n_steps)
    previous, history = list(outputs_info), []
    for step in steps:
        out = fn(*[seq[step] for seq in sequences], *previous, *non_sequences)
        previous = list(out) if isinstance(out, (list, tuple)) else [out]
        history.append(previous)
    return [pt.stack([outs[k] for outs in history]) for k in range(len(history[0]))]
