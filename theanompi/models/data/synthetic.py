"""Synthetic classification data of any input shape and class count, for benchmarks.

Deterministic per seed and learnable: sample ``i`` of a split has label
``y_i`` (uniform over the classes) and input ``means[y_i] + noise * N(0, 1)``,
with one fixed random mean pattern per class (``separation`` scales it). The
noise of a sample depends only on (seed, split, i), so a sample is the same
whichever rank loads it and whether or not the set is cached in memory.
Sharding is :class:`~theanompi.models.data.base.DataClass`'s (one unit = one
sample), as for in-memory arrays.

Small sets (``cache=None`` and at most :data:`CACHE_LIMIT_BYTES`) are generated
once and held in memory; larger ones are generated batch by batch (wrap them in
:class:`~theanompi.models.data.prefetch.PrefetchData` to overlap that with
training).

Example
-------
>>> d = SyntheticData((3, 8, 8), n_classes=4, batch_size=16, rank=0, size=2, seed=1, n_train=100, n_val=20)
>>> d.n_batch_train, d.n_batch_val, d.input_shape
(4, 1, (3, 8, 8))
>>> xb, yb = d.train_batch(0)
>>> xb.shape, xb.dtype, yb.dtype
((16, 3, 8, 8), dtype('float32'), dtype('int32'))
"""

from __future__ import annotations

import logging
import math

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.models.data.base import ArraySpec, DataClass

log = logging.getLogger(__name__)

#: ``cache=None`` holds the inputs in memory when they take at most this many bytes.
CACHE_LIMIT_BYTES = 256 * 2 ** 20

TRAIN, VAL = 0, 1


def _number(name: str, value, minimum: float = 0.0) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool) \
            or not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name}={value!r} is not allowed; use a number >= {minimum:g}")
    return float(value)


def _count(name: str, value, minimum: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name}={value!r} is not allowed; use an integer >= {minimum}")
    return int(value)


class SyntheticData(DataClass):
    """Deterministic, learnable synthetic data: class-dependent means plus Gaussian noise.

    Parameters
    ----------
    shape : tuple of int
        Shape of one input, e.g. ``(3, 224, 224)`` or ``(784,)``.
    n_classes : int
        Number of classes (>= 2).
    batch_size, rank, size, seed : int
        Samples per rank batch, this worker, the number of workers, the seed of
        the data *and* of the common per-epoch shuffle.
    n_train, n_val : int
        Samples in the training (>= 1) and validation (>= 0) sets.
    separation : float
        Scale of the class mean patterns (standard normal per element times this).
    noise : float
        Standard deviation of the per-sample noise.
    dtype : str
        Floating dtype of the inputs.
    cache : bool or None
        Hold the inputs in memory; ``None``: when they fit in :data:`CACHE_LIMIT_BYTES`.

    Attributes
    ----------
    class_means : ndarray
        ``(n_classes,) + shape``, the mean input of each class.
    x_train, x_val : ndarray or ArraySpec
        The inputs when cached, else their shape and dtype.
    y_train, y_val : ndarray
        int32 labels.

    Example
    -------
    >>> d = SyntheticData((10,), n_classes=3, batch_size=4, rank=0, size=1, seed=0, n_train=12, n_val=0)
    >>> xb, yb = d.train_batch(0)
    >>> d2 = SyntheticData((10,), n_classes=3, batch_size=4, rank=0, size=1, seed=0, n_train=12, n_val=0,
    ...                    cache=False)
    >>> bool(np.array_equal(xb, d2.train_batch(0)[0]))
    True
    """

    def __init__(self, shape, n_classes: int, batch_size: int, rank: int, size: int, seed: int, *,
                 n_train: int = 1024, n_val: int = 256, separation: float = 1.0, noise: float = 1.0,
                 dtype: str = "float32", cache: bool | None = None):
        try:
            shape = tuple(shape)
        except TypeError:
            raise ConfigError(f"shape={shape!r} is not allowed; use a tuple of integers >= 1") from None
        if not shape or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
                                for s in shape):
            raise ConfigError(f"shape={shape!r} is not allowed; use a tuple of integers >= 1")
        self.shape = tuple(int(s) for s in shape)
        self.n_classes = _count("n_classes", n_classes, 2)
        n_train = _count("n_train", n_train, 1)
        n_val = _count("n_val", n_val, 0)
        self.separation = _number("separation", separation)
        self.noise = _number("noise", noise)
        try:
            float_dtype: np.dtype | None = np.dtype(dtype)
        except TypeError:
            float_dtype = None
        if float_dtype is None or float_dtype.kind != "f":
            raise ConfigError(f"dtype={dtype!r} is not allowed; use a floating dtype such as 'float32'")
        self.dtype = float_dtype
        self.batch_size = batch_size
        self.setup_shards(n_train, n_val, batch_size, rank, size, seed)

        self.class_means = (np.random.default_rng([self.seed, 2000]).standard_normal((self.n_classes,) + self.shape)
                            * self.separation).astype(self.dtype)
        self.y_train = self._labels(TRAIN, n_train)
        self.y_val = self._labels(VAL, n_val)
        n_bytes = (n_train + n_val) * math.prod(self.shape) * self.dtype.itemsize
        self.cached = n_bytes <= CACHE_LIMIT_BYTES if cache is None else bool(cache)
        self.x_val: np.ndarray | ArraySpec
        if self.cached:
            self.x_train = self._inputs(TRAIN, np.arange(n_train))
            self.x_val = self._inputs(VAL, np.arange(n_val))
        else:
            self.x_train = ArraySpec((n_train,) + self.shape, self.dtype)
            self.x_val = ArraySpec((n_val,) + self.shape, self.dtype)
        log.debug("synthetic data %s x %d classes: %d train, %d val samples (%s)", self.shape, self.n_classes,
                  n_train, n_val, "cached" if self.cached else "generated per batch")

    def _labels(self, split: int, n: int) -> np.ndarray:
        return np.random.default_rng([self.seed, 1000 + split]).integers(0, self.n_classes, n).astype(np.int32)

    def _inputs(self, split: int, indices) -> np.ndarray:
        labels = self.y_train if split == TRAIN else self.y_val
        out = np.empty((len(indices),) + self.shape, self.dtype)
        for k, i in enumerate(indices):
            rng = np.random.default_rng([self.seed, split, int(i)])
            out[k] = rng.standard_normal(self.shape, dtype=np.float64 if self.dtype.itemsize > 4 else np.float32)
        if self.noise != 1.0:
            out *= self.dtype.type(self.noise)
        out += self.class_means[labels[np.asarray(indices, dtype=np.intp)]]
        return out

    def load_train(self, units, count):
        x = self.x_train[units] if self.cached else self._inputs(TRAIN, units)
        return x, self.y_train[units]

    def load_val(self, units, count):
        x = self.x_val[units] if self.cached else self._inputs(VAL, units)
        return x, self.y_val[units]
