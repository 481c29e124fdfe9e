"""CIFAR-10 from the standard python batch files, unpickled without executing anything.

The directory (cfg ``MODEL_DATA_DIR`` later) holds what ``cifar-10-python.tar.gz``
unpacks to: ``data_batch_1`` .. ``data_batch_5`` (training, 10,000 images each)
and ``test_batch`` (validation). Each file is a pickle of a dict with
``b'data'`` (uint8, ``(N, 3072)``: 1024 red, 1024 green, 1024 blue values, each a
row-major 32x32 plane) and ``b'labels'`` (N ints in 0..9), plus
``b'batch_label'`` and ``b'filenames'``.

Security: a pickle can run any callable it names, so the files are read by the safe
loader (:func:`theanompi.core.safe_load.load_pickle`), which resolves only numpy's array
reconstruction globals (:data:`~theanompi.core.safe_load.NUMPY_ARRAY_GLOBALS`) and refuses
every other one with :class:`~theanompi.core.safe_load.UnsafePickleError` *before* anything
is called.

:class:`Cifar10_data` is Theano-MPI's spelling (``from theanompi.models.data import
Cifar10_data``): uint8 file batches of an 80/20 split of the training files, found in
the session's ``MODEL_DATA_DIR`` (see :mod:`theanompi.models.data.theanompi_api`).

Batches of :class:`Cifar10Data` are float32 NCHW scaled to [0, 1], minus the per-channel mean of the
training images unless ``subtract_mean=False``; labels are int32. The images stay
uint8 in memory (``x_train``/``x_val``, 184 MB for the whole set) and are
converted batch by batch.

Example
-------
>>> data = Cifar10Data("/data/cifar-10-batches-py", batch_size=128, rank=0, size=2, seed=0,
...                    train_size=1000, val_size=200)             # doctest: +SKIP
>>> xb, yb = data.train_batch(0)                                  # doctest: +SKIP
>>> xb.shape, xb.dtype, yb.dtype                                  # doctest: +SKIP
((128, 3, 32, 32), dtype('float32'), dtype('int32'))
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load import NUMPY_ARRAY_GLOBALS, load_pickle
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.theanompi_api import FileBatchAPI, session_data_dir, split_into_batches

log = logging.getLogger(__name__)

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
N_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
N_PIXELS = 3 * 32 * 32


def safe_unpickle(path) -> object:
    """Unpickle ``path`` with the safe loader, numpy arrays only (``encoding='bytes'``, like the official loader).

    Reads the official Python 2 files and Python 3 pickles of protocols 2 to 4.
    Protocol 5 builds arrays through ``numpy._core.numeric._frombuffer``, which is
    not allowed.

    Raises
    ------
    ConfigError
        The file is missing or not a readable pickle.
    UnsafePickleError
        The pickle references a global other than numpy's array reconstruction.

    Example
    -------
    >>> import os, pickle, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data_batch_1")
    >>> with open(path, "wb") as f:
    ...     pickle.dump({b"data": np.arange(3, dtype=np.uint8), b"labels": [np.int64(7)]}, f, protocol=2)
    >>> out = safe_unpickle(path)
    >>> out[b"data"].tolist(), int(out[b"labels"][0])
    ([0, 1, 2], 7)
    """
    return load_pickle(path, NUMPY_ARRAY_GLOBALS, what="CIFAR-10 file", encoding="bytes")


def _entry(batch: dict, key: str, path: Path):
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    raise ConfigError(f"CIFAR-10 file '{path}' has no {key.encode()!r} entry (keys: {sorted(map(repr, batch))})")


def load_cifar_batch(path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 ``(N, 3, 32, 32)``, labels int32 ``(N,)``) of one batch file, checked.

    Example
    -------
    >>> x, y = load_cifar_batch("cifar-10-batches-py/data_batch_1")      # doctest: +SKIP
    >>> x.shape, y[:3]                                                    # doctest: +SKIP
    ((10000, 3, 32, 32), array([6, 9, 9], dtype=int32))
    """
    path = Path(path)
    batch = safe_unpickle(path)
    if not isinstance(batch, dict):
        raise ConfigError(f"CIFAR-10 file '{path}' holds a {type(batch).__name__}, not a dict")
    data = _entry(batch, "data", path)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != N_PIXELS:
        shape = getattr(data, "shape", None)
        dtype = getattr(data, "dtype", type(data).__name__)
        raise ConfigError(f"CIFAR-10 file '{path}': data has shape {shape} and dtype {dtype}; "
                          f"expected uint8 (N, {N_PIXELS})")
    try:
        labels = np.asarray(_entry(batch, "labels", path))
    except ValueError as e:
        raise ConfigError(f"CIFAR-10 file '{path}': labels are not a list of integers ({e})") from None
    if labels.ndim != 1 or len(labels) != len(data):
        raise ConfigError(f"CIFAR-10 file '{path}': {len(data)} images but labels of shape {labels.shape}")
    if len(labels) and labels.dtype.kind not in "iu":
        raise ConfigError(f"CIFAR-10 file '{path}': labels have dtype {labels.dtype}; expected integers")
    bad = np.flatnonzero((labels < 0) | (labels >= N_CLASSES))
    if len(bad):
        raise ConfigError(f"CIFAR-10 file '{path}': label {int(labels[bad[0]])} at index {bad[0]} is outside "
                          f"0..{N_CLASSES - 1}")
    return data.reshape((-1,) + IMAGE_SHAPE), labels.astype(np.int32)


def _check_size(name: str, value, available: int | None) -> int | None:
    """``value`` checked against 1..available (only its type and >= 1 while ``available`` is None)."""
    if value is None:
        return available
    allowed = f"an integer in 1..{available}" if available is not None else "an integer >= 1"
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1 \
            or (available is not None and value > available):
        raise ConfigError(f"{name}={value!r} is not allowed; use {allowed} (or None for all)")
    return int(value)


def _check_files(data_dir, names) -> Path:
    """``data_dir`` as a Path, checked to be a directory holding all of ``names``."""
    root = Path(data_dir)
    if not root.is_dir():
        raise ConfigError(f"CIFAR-10 directory '{root}' does not exist (expected the unpacked "
                          "cifar-10-python.tar.gz: data_batch_1..5, test_batch)")
    for name in names:
        if not (root / name).is_file():
            expected = "data_batch_1..5 and test_batch" if TEST_FILE in names else "data_batch_1..5"
            raise ConfigError(f"CIFAR-10 file '{root / name}' is missing (expected {expected})")
    return root


def _read_training_files(root: Path, train_size: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``train_size`` (None: all) images and labels of data_batch_1..5, reading only the files needed."""
    _check_size("train_size", train_size, None)
    xs, ys, n = [], [], 0
    for name in TRAIN_FILES:
        if train_size is not None and n >= train_size:
            break
        x, y = load_cifar_batch(root / name)
        xs.append(x)
        ys.append(y)
        n += len(x)
    x_train, y_train = np.concatenate(xs), np.concatenate(ys)
    train_size = _check_size("train_size", train_size, len(x_train))
    return x_train[:train_size], y_train[:train_size]


def load_cifar10_training_set(data_dir) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 ``(N, 3, 32, 32)``, labels int32) of data_batch_1..5 (``test_batch`` is not needed).

    Example
    -------
    >>> x, y = load_cifar10_training_set("cifar-10-batches-py")      # doctest: +SKIP
    >>> x.shape                                                      # doctest: +SKIP
    (50000, 3, 32, 32)
    """
    return _read_training_files(_check_files(data_dir, TRAIN_FILES), None)


def load_cifar10(data_dir, train_size: int | None = None, val_size: int | None = None):
    """((x_train, y_train), (x_val, y_val)) as uint8 NCHW images and int32 labels.

    Parameters
    ----------
    data_dir : path
        Directory holding ``data_batch_1..5`` and ``test_batch``.
    train_size, val_size : int, optional
        Keep only the first ``train_size`` training / ``val_size`` test images (in
        file order); files not needed for them are checked to exist but not read.

    Example
    -------
    >>> (xt, yt), (xv, yv) = load_cifar10("cifar-10-batches-py", train_size=500)   # doctest: +SKIP
    >>> xt.shape, xv.shape                                                        # doctest: +SKIP
    ((500, 3, 32, 32), (10000, 3, 32, 32))
    """
    root = _check_files(data_dir, TRAIN_FILES + (TEST_FILE,))
    _check_size("train_size", train_size, None)
    _check_size("val_size", val_size, None)
    x_train, y_train = _read_training_files(root, train_size)
    x_val, y_val = load_cifar_batch(root / TEST_FILE)
    val_size = _check_size("val_size", val_size, len(x_val))
    log.debug("CIFAR-10 from %s: %d training, %d validation images", root, len(x_train), val_size)
    return (x_train, y_train), (x_val[:val_size], y_val[:val_size])


class Cifar10Data(ShardedArrayData):
    """CIFAR-10 sharded by rank: float32 NCHW batches in [0, 1], optionally minus the channel means.

    Parameters
    ----------
    data_dir : path
        Directory of the python batch files (``data_batch_1..5``, ``test_batch``).
    batch_size, rank, size, seed : int
        As for :class:`~theanompi.models.data.base.ShardedArrayData`.
    train_size, val_size : int, optional
        Use only the first images (small tests, quick runs).
    subtract_mean : bool
        Subtract the per-channel mean of the (used) training images, in [0, 1] units.

    Attributes
    ----------
    mean : ndarray
        float32 ``(1, 3, 1, 1)`` subtracted from every batch (zeros without ``subtract_mean``).

    Example
    -------
    >>> data = Cifar10Data("cifar-10-batches-py", 64, rank=0, size=1, seed=0, train_size=256)  # doctest: +SKIP
    >>> data.n_batch_train, data.input_shape                                                   # doctest: +SKIP
    (4, (3, 32, 32))
    """

    def __init__(self, data_dir, batch_size: int, rank: int, size: int, seed: int, *,
                 train_size: int | None = None, val_size: int | None = None, subtract_mean: bool = True):
        (xt, yt), (xv, yv) = load_cifar10(data_dir, train_size, val_size)
        super().__init__(xt, yt, xv, yv, batch_size, rank, size, seed)
        mean = np.zeros((1, 3, 1, 1), np.float32)
        if subtract_mean:
            sums = xt.sum(axis=(0, 2, 3), dtype=np.float64)
            mean[0, :, 0, 0] = sums / (len(xt) * 32 * 32 * 255.0)
        self.mean = mean

    def _convert(self, x: np.ndarray) -> np.ndarray:
        out = x.astype(np.float32)
        out *= np.float32(1.0 / 255.0)
        out -= self.mean
        return out

    def load_train(self, units, count):
        return self._convert(self.x_train[units]), self.y_train[units]

    def load_val(self, units, count):
        return self._convert(self.x_val[units]), self.y_val[units]


#: Fraction of the training files' images that Cifar10_data trains on (the rest validate), as in Theano-MPI.
TRAIN_FRACTION = 0.8
#: Stream of the train/val split in the session seed's generators (epoch orders use (seed, epoch)).
SPLIT_STREAM = 1_000_003


class Cifar10_data(FileBatchAPI):  # Theano-MPI's name
    """Theano-MPI's CIFAR-10 DataClass: uint8 NCHW file batches from ``MODEL_DATA_DIR``.

    Reads ``data_batch_1..5`` from the session's ``MODEL_DATA_DIR`` (Python 2 or
    Python 3 pickles, with the restricted unpickler) and, like Theano-MPI, splits
    their images 80/20 into training and validation sets; ``test_batch`` is not
    used. Theano-MPI drew the split from an unseeded permutation; here it is
    seeded by the session's SEED, so every rank holds the same split. The
    sharding methods are :class:`~theanompi.models.data.theanompi_api.FileBatchAPI`'s.

    Parameters
    ----------
    verbose : bool
        Log the batching and sharding at INFO level (else DEBUG).

    Attributes
    ----------
    channels, width, height, n_class : int
        3, 32, 32, 10.
    rawdata : list
        ``[train_img (N, 3, 32, 32) uint8, train_labels int32, val_img, val_labels,
        img_mean (3, 32, 32, 1) float32]``, the mean image of the training images.

    Example
    -------
    >>> import os, pickle, tempfile
    >>> from theanompi.models.contract import WorkerConfig
    >>> from theanompi.models.current_config import set_current
    >>> root = tempfile.mkdtemp()
    >>> for name in TRAIN_FILES:
    ...     batch = {"data": np.zeros((10, 3072), np.uint8), "labels": [3] * 10}
    ...     with open(os.path.join(root, name), "wb") as f:
    ...         pickle.dump(batch, f, protocol=2)
    >>> set_current(WorkerConfig(rank=0, size=2, seed=0, device="cpu", model_options={"data_dir": root}))
    >>> data = Cifar10_data(verbose=False)
    >>> data.rawdata[0].shape, data.rawdata[2].shape, data.rawdata[4].shape
    ((40, 3, 32, 32), (10, 3, 32, 32), (3, 32, 32, 1))
    >>> data.batch_data(8); data.extend_data(rank=0, size=2)
    >>> data.shuffle_data(mode="train", common_seed=1234); data.shard_data(mode="train", rank=0, size=2)
    >>> data.n_batch_train, data.train_img_shard[0].shape, data.train_labels_shard[0].dtype
    (3, (8, 3, 32, 32), dtype('int32'))
    >>> set_current(None)
    """

    channels, width, height, n_class = 3, 32, 32, N_CLASSES

    def __init__(self, verbose: bool = False):
        self.init_session("Cifar10_data", verbose)
        x, y = load_cifar10_training_set(session_data_dir("Cifar10_data"))
        order = np.random.default_rng([self.session_seed, SPLIT_STREAM]).permutation(len(x))
        n_train = int(len(x) * TRAIN_FRACTION)
        if n_train < 1:
            raise ConfigError(f"Cifar10_data: the training files hold {len(x)} images; at least 2 are needed")
        train, val = order[:n_train], order[n_train:]  # the split, and the images' order in the file batches
        x_train = x[train]
        img_mean = x_train.mean(axis=0, dtype=np.float64).astype(np.float32)[..., np.newaxis]
        self.x_train, self.x_val = x_train, x[val]
        self.rawdata = [x_train, y[train], self.x_val, y[val], img_mean]

    def make_file_batches(self, file_batch_size):
        n = len(self.rawdata[0])
        if file_batch_size > n:
            raise ConfigError(f"Cifar10_data: file_batch_size={file_batch_size} is larger than the {n} "
                              "training images")
        train_img, train_labels = split_into_batches(self.rawdata[0], self.rawdata[1], file_batch_size)
        val_img, val_labels = split_into_batches(self.rawdata[2], self.rawdata[3], file_batch_size)
        return train_img, train_labels, val_img, val_labels

    def load_train(self, units, count):
        return self.train_img[int(units[0])], self.train_labels[int(units[0])]

    def load_val(self, units, count):
        return self.val_img[int(units[0])], self.val_labels[int(units[0])]
