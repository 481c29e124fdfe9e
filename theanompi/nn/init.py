"""Parameter initializers (Lasagne's ``lasagne.init``).

Every initializer is a callable ``init(shape) -> numpy array`` of floatX (also
available as ``init.sample(shape)``). Random initializers draw from the generator
of :mod:`theanompi.nn.random` (:func:`set_rng`, also reachable here): the same seed
on every rank and all ranks build identical networks.

Fan-in/fan-out follow Lasagne: for a dense ``W`` of shape (n_in, n_out) and
a convolution ``W`` of shape (n_filters, n_channels, kh, kw),
``fan_in + fan_out = (shape[0] + shape[1]) * prod(shape[2:])`` (Glorot) and
``fan_in = shape[0]`` (2-D) or ``prod(shape[1:])`` (>2-D) (He).

Example
-------
>>> import numpy as np
>>> from theanompi.nn import init
>>> init.set_rng(np.random.default_rng(0))
>>> w = init.GlorotUniform().sample((100, 50))
>>> bool(np.abs(w).max() <= np.sqrt(6.0 / 150))
True
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor

from theanompi.nn.random import get_rng, set_rng

__all__ = [
    "Constant", "Glorot", "GlorotNormal", "GlorotUniform", "He", "HeNormal", "HeUniform", "Initializer", "Normal",
    "Orthogonal", "Sparse", "Uniform", "get_rng", "set_rng",
]


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
        raise RuntimeError(f"{who} needs a shape with at least {min_ndim} dimensions, got {shape}")
    return shape


def _check_c01b(shape, who):
    shape = tuple(shape)
    if len(shape) != 4:
        raise RuntimeError(f"{who}(c01b=True) needs a 4-D shape (channels, rows, cols, batch), got {shape}")
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


class Glorot(Initializer):
    """Glorot/Xavier scaling of ``initializer``: std = gain * sqrt(2 / ((fan_in + fan_out) * receptive field)).

    Parameters
    ----------
    initializer : class
        An initializer class taking ``std=`` (:class:`Normal`, :class:`Uniform`).
    gain : float or 'relu'
    c01b : bool
        Filters laid out (channels, rows, cols, filters) (cuda-convnet): fans are
        ``shape[0]`` and ``shape[3]``, the receptive field ``shape[1] * shape[2]``.

    Example
    -------
    >>> Glorot(Normal).sample((4, 3)).shape
    (4, 3)
    """

    def __init__(self, initializer, gain=1.0, c01b=False):
        self.initializer = initializer
        self.gain = _gain(gain, type(self).__name__)
        self.c01b = bool(c01b)

    def std(self, shape):
        who = type(self).__name__
        if self.c01b:
            shape = _check_c01b(shape, who)
            fans, receptive = shape[0] + shape[3], shape[1] * shape[2]
        else:
            shape = _check_shape(shape, who, 2)
            fans, receptive = shape[0] + shape[1], int(np.prod(shape[2:]))
        return self.gain * np.sqrt(2.0 / (fans * receptive))

    def sample(self, shape):
        return self.initializer(std=self.std(shape)).sample(shape)


class GlorotNormal(Glorot):
    """Glorot/Xavier normal: std = gain * sqrt(2 / (fan_in + fan_out)).

    Example
    -------
    >>> GlorotNormal(gain="relu").sample((20, 10)).dtype == np.dtype(pytensor.config.floatX)
    True
    """

    def __init__(self, gain=1.0, c01b=False):
        super().__init__(Normal, gain, c01b)


class GlorotUniform(Glorot):
    """Glorot/Xavier uniform on ±gain * sqrt(6 / (fan_in + fan_out)).

    Example
    -------
    >>> w = GlorotUniform().sample((30, 20))
    >>> bool(np.abs(w).max() <= np.sqrt(6 / 50))
    True
    """

    def __init__(self, gain=1.0, c01b=False):
        super().__init__(Uniform, gain, c01b)


class He(Initializer):
    """He scaling of ``initializer``: std = gain * sqrt(1 / fan_in).

    ``fan_in`` is ``shape[0]`` for a matrix, ``prod(shape[1:])`` for filters and
    ``prod(shape[:3])`` with ``c01b=True`` (cuda-convnet's filter layout).

    Example
    -------
    >>> He(Uniform, c01b=True).sample((2, 3, 3, 8)).shape
    (2, 3, 3, 8)
    """

    def __init__(self, initializer, gain=1.0, c01b=False):
        self.initializer = initializer
        self.gain = _gain(gain, type(self).__name__)
        self.c01b = bool(c01b)

    def std(self, shape):
        who = type(self).__name__
        if self.c01b:
            fan_in = int(np.prod(_check_c01b(shape, who)[:3]))
        else:
            shape = _check_shape(shape, who, 2)
            fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:]))
        return self.gain * np.sqrt(1.0 / fan_in)

    def sample(self, shape):
        return self.initializer(std=self.std(shape)).sample(shape)


class HeNormal(He):
    """He normal: std = gain * sqrt(1 / fan_in); use ``gain='relu'`` for ReLU nets.

    Example
    -------
    >>> HeNormal("relu").sample((8, 3, 3, 3)).shape
    (8, 3, 3, 3)
    """

    def __init__(self, gain=1.0, c01b=False):
        super().__init__(Normal, gain, c01b)


class HeUniform(He):
    """He uniform on ±gain * sqrt(3 / fan_in).

    Example
    -------
    >>> bool(np.abs(HeUniform().sample((12, 4))).max() <= np.sqrt(3 / 12))
    True
    """

    def __init__(self, gain=1.0, c01b=False):
        super().__init__(Uniform, gain, c01b)


class Sparse(Initializer):
    """A matrix whose columns each have ``int(sparsity * rows)`` nonzero entries, drawn from N(0, std).

    Example
    -------
    >>> w = Sparse(sparsity=0.5).sample((4, 3))
    >>> (w != 0).sum(axis=0).tolist()
    [2, 2, 2]
    """

    def __init__(self, sparsity=0.1, std=0.01):
        if not 0 <= sparsity <= 1:
            raise ValueError(f"Sparse: sparsity must be in [0, 1], got {sparsity!r}")
        self.sparsity, self.std = sparsity, std

    def sample(self, shape):
        shape = tuple(shape)
        if len(shape) != 2:
            raise RuntimeError(f"Sparse needs a 2-D shape, got {shape}")
        rows, cols = shape
        nonzero = int(self.sparsity * rows)
        w = np.zeros(shape, dtype=pytensor.config.floatX)
        rng = get_rng()
        for col in range(cols):
            picked = rng.permutation(rows)[:nonzero]
            w[picked, col] = rng.normal(0.0, self.std, size=nonzero)
        return w


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
