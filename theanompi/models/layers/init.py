"""Parameter initializers (Lasagne's ``lasagne.init``).

Every initializer is a callable ``init(shape) -> numpy array`` of floatX (also
available as ``init.sample(shape)``). Random initializers draw from one
module-level generator: call :func:`set_rng` with the same seed on every rank
and all ranks build identical networks.

Fan-in/fan-out follow Lasagne: for a dense ``W`` of shape (n_in, n_out) and
a convolution ``W`` of shape (n_filters, n_channels, kh, kw),
``fan_in + fan_out = (shape[0] + shape[1]) * prod(shape[2:])`` (Glorot) and
``fan_in = shape[0]`` (2-D) or ``prod(shape[1:])`` (>2-D) (He).

Example
-------
>>> import numpy as np
>>> from theanompi.models.layers import init
>>> init.set_rng(np.random.default_rng(0))
>>> w = init.GlorotUniform().sample((100, 50))
>>> bool(np.abs(w).max() <= np.sqrt(6.0 / 150))
True
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor

__all__ = [
    "Constant", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "Initializer", "Normal",
    "Orthogonal", "Uniform", "get_rng", "set_rng",
]

_rng: np.random.Generator | np.random.RandomState = np.random.default_rng(1234)


def set_rng(rng) -> None:
    """Use ``rng`` (a ``numpy.random.Generator``, a ``RandomState`` or an int seed) for all initializers.

    Example
    -------
    >>> set_rng(np.random.default_rng(42))
    """
    global _rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        rng = np.random.default_rng(int(rng))
    if not isinstance(rng, (np.random.Generator, np.random.RandomState)):
        raise ValueError(f"set_rng: expected a numpy Generator, RandomState or int seed, got {rng!r}")
    _rng = rng


def get_rng():
    """The generator the initializers draw from.

    Example
    -------
    >>> isinstance(get_rng(), (np.random.Generator, np.random.RandomState))
    True
    """
    return _rng


def _floatX(a):
    return np.asarray(a, dtype=pytensor.config.floatX)


def _gain(gain, who):
    if gain == "relu":
        return np.sqrt(2.0)
    if isinstance(gain, numbers.Real) and not isinstance(gain, bool) and gain > 0:
        return float(gain)
    raise ValueError(f"{who}: gain must be a positive number or 'relu', got {gain!r}")


def _check_shape(shape, who, min_ndim=0):
    shape = tuple(shape)
    if len(shape) < min_ndim:
        raise ValueError(f"{who} needs a shape with at least {min_ndim} dimensions, got {shape}")
    return shape


class Initializer:
    """Base class: subclasses implement :meth:`sample`.

    Example
    -------
    >>> class Ones(Initializer):
    ...     def sample(self, shape):
    ...         return np.ones(shape, "float32")
    >>> Ones()((2,)).tolist()
    [1.0, 1.0]
    """

    def __call__(self, shape):
        return self.sample(shape)

    def sample(self, shape):
        raise NotImplementedError

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Constant(Initializer):
    """Every entry equals ``val``.

    Example
    -------
    >>> Constant(0.5).sample((2,)).tolist()
    [0.5, 0.5]
    """

    def __init__(self, val=0.0):
        self.val = val

    def sample(self, shape):
        return _floatX(np.full(tuple(shape), self.val))


class Normal(Initializer):
    """Normal distribution with mean ``mean`` and standard deviation ``std``.

    Example
    -------
    >>> Normal(std=0.1).sample((3, 2)).shape
    (3, 2)
    """

    def __init__(self, std=0.01, mean=0.0):
        if not std >= 0:
            raise ValueError(f"Normal: std must be >= 0, got {std!r}")
        self.std, self.mean = std, mean

    def sample(self, shape):
        return _floatX(get_rng().normal(self.mean, self.std, size=tuple(shape)))


class Uniform(Initializer):
    """Uniform distribution.

    Parameters
    ----------
    range : float or (low, high)
        ``r`` samples from [-r, r] (shifted by ``mean``), a pair from [low, high].
    std, mean : float, optional
        If ``std`` is given, samples from ``mean ± sqrt(3) * std`` instead.

    Example
    -------
    >>> bool(np.all(np.abs(Uniform(0.1).sample((50,))) <= 0.1))
    True
    """

    def __init__(self, range=0.01, std=None, mean=0.0):
        if std is not None:
            a = mean - np.sqrt(3) * std
            b = mean + np.sqrt(3) * std
        else:
            try:
                a, b = range
            except TypeError:
                a, b = -range, range
            a, b = a + mean, b + mean
        if not a <= b:
            raise ValueError(f"Uniform: low must be <= high, got range={range!r}, std={std!r}, mean={mean!r}")
        self.range = (a, b)

    def sample(self, shape):
        return _floatX(get_rng().uniform(low=self.range[0], high=self.range[1], size=tuple(shape)))


class _Glorot(Initializer):
    def __init__(self, gain=1.0):
        self.gain = _gain(gain, type(self).__name__)

    def std(self, shape):
        shape = _check_shape(shape, type(self).__name__, 2)
        n1, n2 = shape[:2]
        receptive = int(np.prod(shape[2:]))
        return self.gain * np.sqrt(2.0 / ((n1 + n2) * receptive))


class GlorotNormal(_Glorot):
    """Glorot/Xavier normal: std = gain * sqrt(2 / (fan_in + fan_out)).

    Example
    -------
    >>> GlorotNormal(gain="relu").sample((20, 10)).dtype == np.dtype(pytensor.config.floatX)
    True
    """

    def sample(self, shape):
        return Normal(self.std(shape)).sample(shape)


class GlorotUniform(_Glorot):
    """Glorot/Xavier uniform on ±gain * sqrt(6 / (fan_in + fan_out)).

    Example
    -------
    >>> w = GlorotUniform().sample((30, 20))
    >>> bool(np.abs(w).max() <= np.sqrt(6 / 50))
    True
    """

    def sample(self, shape):
        return Uniform(std=self.std(shape)).sample(shape)


class _He(Initializer):
    def __init__(self, gain=1.0):
        self.gain = _gain(gain, type(self).__name__)

    def std(self, shape):
        shape = _check_shape(shape, type(self).__name__, 2)
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:]))
        return self.gain * np.sqrt(1.0 / fan_in)


class HeNormal(_He):
    """He normal: std = gain * sqrt(1 / fan_in); use ``gain='relu'`` for ReLU nets.

    Example
    -------
    >>> HeNormal("relu").sample((8, 3, 3, 3)).shape
    (8, 3, 3, 3)
    """

    def sample(self, shape):
        return Normal(self.std(shape)).sample(shape)


class HeUniform(_He):
    """He uniform on ±gain * sqrt(3 / fan_in).

    Example
    -------
    >>> bool(np.abs(HeUniform().sample((12, 4))).max() <= np.sqrt(3 / 12))
    True
    """

    def sample(self, shape):
        return Uniform(std=self.std(shape)).sample(shape)


class Orthogonal(Initializer):
    """(Semi-)orthogonal matrix, reshaped to ``shape`` (flattened over ``shape[1:]``), times ``gain``.

    Example
    -------
    >>> q = Orthogonal().sample((4, 4)).astype("float64")
    >>> bool(np.allclose(q @ q.T, np.eye(4), atol=1e-5))
    True
    """

    def __init__(self, gain=1.0):
        self.gain = _gain(gain, "Orthogonal")

    def sample(self, shape):
        shape = _check_shape(shape, "Orthogonal", 2)
        flat = (shape[0], int(np.prod(shape[1:])))
        a = get_rng().normal(0.0, 1.0, flat)
        u, _, v = np.linalg.svd(a, full_matrices=False)
        q = u if u.shape == flat else v
        return _floatX(self.gain * q.reshape(shape))
