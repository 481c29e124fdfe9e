"""Weight initialisers of :mod:`theanompi.models.layers2`: a floatX shared variable ``.val`` of ``.shape``.

Random initialisers draw from ``theanompi.models.layers2.rng`` (looked up at each draw, so a model
that replaces it is honoured). The fan formulas are Theano-MPI's: for a 4-D ``(b, c, 0, 1)`` or 2-D
``(b, c)`` shape, Glorot uses ``gain * sqrt(6 / ((b + c) * kernel area))`` as the standard deviation
(normal) or half-width (uniform); He uses ``gain * sqrt(3 / (c * kernel area))``.

Example
-------
>>> w = Normal((3, 2), std=0.1)
>>> w.val.get_value().shape, w.val.dtype, w.shape
((3, 2), 'float32', (3, 2))
>>> Constant((2,), val=0.5).val.get_value().tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import logging
import numbers
import os
import sys

import numpy as np
import pytensor

__all__ = ["Constant", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "Normal", "Uniform", "Weight"]

log = logging.getLogger(__name__)


def weight_rng() -> np.random.RandomState:
    """The generator the initialisers draw from: the package attribute ``layers2.rng``.

    Example
    -------
    >>> import theanompi.models.layers2 as layers2
    >>> weight_rng() is layers2.rng
    True
    """
    return sys.modules[__package__].rng


def as_shape(shape, who: str) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of positive ints) as a tuple of Python ints, or ValueError.

    Example
    -------
    >>> as_shape(4, "Constant"), as_shape(np.array([2, 3]), "Normal")
    ((4,), (2, 3))
    """
    dims = (shape,) if isinstance(shape, numbers.Integral) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise ValueError(f"{who}: shape must be an int or a sequence of ints, got {shape!r}") from None
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) > 0 for d in dims):
        raise ValueError(f"{who}: shape must hold positive ints, got {shape!r}")
    return tuple(int(d) for d in dims)


class Weight:
    """A parameter: ``.val`` (floatX shared variable), ``.shape`` and ``.np_values`` (its initial value).

    Subclasses draw the initial value; :meth:`save_weight`/:meth:`load_weight` store it as ``DIR + NAME.npy``
    (Theano-MPI joins the two by plain concatenation, so ``dir`` ends with a separator).

    Example
    -------
    >>> import tempfile
    >>> d = tempfile.mkdtemp() + "/"
    >>> w = Constant((2, 2), val=1.0); w.save_weight(d, "w0")
    >>> v = Constant((2, 2), val=0.0); v.load_weight(d, "w0"); v.val.get_value().tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self):
        self.val = None
        self.shape = None
        self.np_values = None

    def _store(self, shape: tuple[int, ...], values) -> None:
        self.shape = shape
        self.np_values = np.asarray(values, dtype=pytensor.config.floatX)
        self.val = pytensor.shared(self.np_values)

    def save_weight(self, dir: str, name: str) -> None:
        """Write the current value to ``dir + name + '.npy'``."""
        np.save(os.fspath(dir) + name + ".npy", self.val.get_value())

    def load_weight(self, dir: str, name: str) -> None:
        """Set the value from ``dir + name + '.npy'``; ValueError if its shape differs from ``.shape``."""
        path = os.fspath(dir) + name + ".npy"
        values = np.load(path, allow_pickle=False)
        if tuple(values.shape) != tuple(self.shape):
            raise ValueError(f"load_weight: {path} holds shape {values.shape}, the weight has shape {self.shape}")
        log.debug("loaded %s, shape %s", path, values.shape)
        self.np_values = np.asarray(values, dtype=pytensor.config.floatX)
        self.val.set_value(self.np_values)


class Constant(Weight):
    """Every entry equals ``val``.

    Example
    -------
    >>> Constant(3, val=0.1).val.get_value().shape
    (3,)
    """

    def __init__(self, shape, val=0):
        super().__init__()
        shape = as_shape(shape, "Constant")
        self._store(shape, np.full(shape, val))


class Normal(Weight):
    """Normal entries of mean ``mean`` and standard deviation ``std``.

    Example
    -------
    >>> Normal((2, 3, 5, 5), std=0.05).shape
    (2, 3, 5, 5)
    """

    def __init__(self, shape, mean=0, std=0.01):
        super().__init__()
        shape = as_shape(shape, "Normal")
        self._store(shape, weight_rng().normal(mean, std, shape))


class Uniform(Weight):
    """Uniform entries in [``low``, ``high``).

    Example
    -------
    >>> bool((Uniform((50,), -0.1, 0.1).val.get_value() < 0.1).all())
    True
    """

    def __init__(self, shape, low, high):
        super().__init__()
        shape = as_shape(shape, "Uniform")
        self._store(shape, weight_rng().uniform(low, high, shape))


def _kernel_area(shape: tuple[int, ...], who: str) -> int:
    if len(shape) == 4:
        return shape[2] * shape[3]
    if len(shape) == 2:
        return 1
    raise ValueError(f"{who}: shape must be 4-D (b, c, 0, 1) or 2-D (b, c), got {shape}")


def glorot_scale(shape: tuple[int, ...], gain: float, who: str = "Glorot") -> float:
    """Theano-MPI's Glorot scale ``gain * sqrt(6 / ((shape[0] + shape[1]) * kernel area))``.

    Example
    -------
    >>> round(glorot_scale((10, 20), 1.0), 4)
    0.4472
    """
    return float(gain * np.sqrt(6.0 / ((shape[0] + shape[1]) * _kernel_area(shape, who))))


def he_scale(shape: tuple[int, ...], gain: float, who: str = "He") -> float:
    """Theano-MPI's He scale ``gain * sqrt(3 / (shape[1] * kernel area))``.

    Example
    -------
    >>> round(he_scale((8, 3, 1, 1), 1.0), 4)
    1.0
    """
    return float(gain * np.sqrt(3.0 / (shape[1] * _kernel_area(shape, who))))


class GlorotNormal(Weight):
    """Normal entries of standard deviation :func:`glorot_scale` (``gain = sqrt(2)`` suits ReLU).

    Example
    -------
    >>> GlorotNormal((16, 8)).shape
    (16, 8)
    """

    def __init__(self, shape, gain=np.sqrt(2)):
        super().__init__()
        shape = as_shape(shape, "GlorotNormal")
        self._store(shape, weight_rng().normal(0, glorot_scale(shape, gain, "GlorotNormal"), shape))


class GlorotUniform(Weight):
    """Uniform entries in ``[-s, s)`` with ``s`` = :func:`glorot_scale`.

    Example
    -------
    >>> w = GlorotUniform((16, 8), gain=1.0)
    >>> bool(abs(w.val.get_value()).max() <= glorot_scale((16, 8), 1.0))
    True
    """

    def __init__(self, shape, gain=np.sqrt(2)):
        super().__init__()
        shape = as_shape(shape, "GlorotUniform")
        scale = glorot_scale(shape, gain, "GlorotUniform")
        self._store(shape, weight_rng().uniform(-scale, scale, shape))


class HeUniform(Weight):
    """Uniform entries in ``[-s, s)`` with ``s`` = :func:`he_scale`.

    Example
    -------
    >>> HeUniform((4, 3, 3, 3)).shape
    (4, 3, 3, 3)
    """

    def __init__(self, shape, gain=np.sqrt(2)):
        super().__init__()
        shape = as_shape(shape, "HeUniform")
        scale = he_scale(shape, gain, "HeUniform")
        self._store(shape, weight_rng().uniform(-scale, scale, shape))


class HeNormal(Weight):
    """Normal entries of standard deviation :func:`he_scale`.

    Example
    -------
    >>> HeNormal((4, 3, 3, 3)).val.dtype
    'float32'
    """

    def __init__(self, shape, gain=np.sqrt(2)):
        super().__init__()
        shape = as_shape(shape, "HeNormal")
        self._store(shape, weight_rng().normal(0, he_scale(shape, gain, "HeNormal"), shape))
