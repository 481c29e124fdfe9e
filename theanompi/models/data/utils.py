"""Theano-MPI's data helpers: ``unpickle`` (restricted) and ``crop_and_mirror`` (seeded) for c01b batches.

Example
-------
>>> batch = np.arange(2 * 6 * 6 * 3, dtype=np.uint8).reshape(2, 6, 6, 3)     # (c, rows, cols, b)
>>> out = crop_and_mirror(batch, "val", rand_crop=True, cropsize=4)
>>> out.shape, out.dtype, bool((out == batch[:, 1:5, 1:5, :]).all())
((2, 4, 4, 3), dtype('float32'), True)
"""

from __future__ import annotations

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.models.data.cifar10 import safe_unpickle
from theanompi.models.data.theanompi_api import session_rng

CROP_STREAM = "crop_and_mirror"


def unpickle(path) -> object:
    """A CIFAR-10 batch file (Python 2 or 3 pickle) as a dict with str keys, read by the safe loader.

    Only numpy arrays, numbers, strings and containers can be built: a file naming
    any other global raises :class:`~theanompi.core.safe_load.UnsafePickleError` before
    anything runs. Top-level ``bytes`` keys (Python 2's) become ``str``; the values
    are as stored (``batch_label``, ``filenames`` stay bytes for Python 2 files).

    Example
    -------
    >>> import os, pickle, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data_batch_1")
    >>> with open(path, "wb") as f:
    ...     pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 2]}, f, protocol=2)
    >>> d = unpickle(path)
    >>> sorted(d), d["data"].shape
    (['data', 'labels'], (2, 3072))
    """
    content = safe_unpickle(path)
    if isinstance(content, dict):
        return {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in content.items()}
    return content


def _crop_box(shape, cropsize) -> tuple[int, int]:
    """(rows, cols) of a c01b batch, checked against ``cropsize``."""
    if len(shape) != 4:
        raise ConfigError(f"crop_and_mirror: data of shape {tuple(shape)}; expected a c01b batch (C, H, W, B)")
    h, w = int(shape[1]), int(shape[2])
    if not isinstance(cropsize, (int, np.integer)) or isinstance(cropsize, bool) or not 1 <= cropsize <= min(h, w):
        raise ConfigError(f"crop_and_mirror: cropsize={cropsize!r} is not allowed for {h}x{w} images; use an integer "
                          f"in 1..{min(h, w)}")
    return h, w


def crop_and_mirror(data, mode: str, rand_crop: bool, flag_batch: bool = True, cropsize: int = 227,
                    rng: np.random.Generator | None = None) -> np.ndarray:
    """Square crop (and random horizontal mirror) of a c01b batch ``(C, H, W, B)``, as float32.

    Parameters
    ----------
    data : array (C, H, W, B)
        The batch, images last (Theano-MPI's c01b).
    mode : {'train', 'val'}
        ``'val'`` (or ``rand_crop=False``): the centre crop, never mirrored.
    rand_crop : bool
        ``'train'`` with ``rand_crop``: a uniformly random crop position and a mirror
        with probability 1/2.
    flag_batch : bool
        One position and mirror for the whole batch (True) or one per image (False).
    cropsize : int
        Side of the crop.
    rng : numpy Generator, optional
        Source of the random choices; default: a generator seeded by the session's
        SEED and rank that continues from call to call (ConfigError outside a session).

    Returns
    -------
    ndarray float32 (C, cropsize, cropsize, B), C-contiguous

    Example
    -------
    >>> batch = np.random.default_rng(0).random((3, 8, 8, 5))
    >>> out = crop_and_mirror(batch, "train", True, flag_batch=False, cropsize=6, rng=np.random.default_rng(1))
    >>> out.shape, out.flags["C_CONTIGUOUS"]
    ((3, 6, 6, 5), True)
    """
    data = np.asarray(data)
    h, w = _crop_box(data.shape, cropsize)
    if mode not in ("train", "val"):
        raise ConfigError(f"crop_and_mirror: mode={mode!r} is not allowed; use 'train' or 'val'")
    if mode == "val" or not rand_crop:
        y, x = (h - cropsize) // 2, (w - cropsize) // 2
        return np.ascontiguousarray(data[:, y:y + cropsize, x:x + cropsize, :], dtype=np.float32)
    rng = session_rng(CROP_STREAM) if rng is None else rng
    n = 1 if flag_batch else data.shape[3]
    ys, xs = rng.integers(0, h - cropsize + 1, n), rng.integers(0, w - cropsize + 1, n)
    mirrors = rng.random(n) < 0.5
    if flag_batch:
        out = data[:, ys[0]:ys[0] + cropsize, xs[0]:xs[0] + cropsize, :]
        return np.ascontiguousarray(out[:, :, ::-1, :] if mirrors[0] else out, dtype=np.float32)
    out = np.empty(data.shape[:1] + (cropsize, cropsize) + data.shape[3:], np.float32)
    for i in range(n):
        image = data[:, ys[i]:ys[i] + cropsize, xs[i]:xs[i] + cropsize, i]
        out[..., i] = image[:, :, ::-1] if mirrors[i] else image
    return out
