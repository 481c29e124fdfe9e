"""Theano-MPI's MNIST DataClass: endless, rank-sharded batch generators over MNIST in ``MODEL_DATA_DIR``.

``MODEL_DATA_DIR`` holds one of

* ``mnist.npz`` with ``x_train``, ``y_train``, ``x_val``, ``y_val`` (optional ``x_test``,
  ``y_test``; without ``x_val``/``y_val`` the test arrays validate, as in Keras's
  ``mnist.npz``), read with ``allow_pickle=False``;
* ``mnist.pkl.gz``, the deeplearning.net pickle ``(train, valid, test)`` of ``(x, y)``
  array pairs, read by the safe loader (:func:`theanompi.core.safe_load.load_pickle`,
  numpy arrays only: a file naming any other global is refused before anything runs).

Images are 784 values, ``(28, 28)`` or ``(1, 28, 28)`` per sample, floats (kept,
as float32) or integers (divided by 255); labels are integers in 0..9.

Unlike Theano-MPI's (every rank drew from all images with an unseeded shuffle),
the batches are sharded by rank with :class:`~theanompi.models.data.base.DataClass`'s
common shuffle seeded by the session's SEED: ``batches_train`` walks pass 0, 1,
2, ... of it, each pass ``n_batch_train`` full batches of this rank's slots,
independently of ``set_epoch``; ``batches_val`` cycles through this rank's
contiguous validation shard (the last batch may be short).

Example
-------
>>> import os, tempfile
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.current_config import set_current
>>> root = tempfile.mkdtemp()
>>> rng = np.random.default_rng(0)
>>> np.savez(os.path.join(root, "mnist.npz"), x_train=rng.random((100, 784), np.float32), y_train=np.arange(100) % 10,
...          x_val=rng.random((30, 784), np.float32), y_val=np.arange(30) % 10)
>>> set_current(WorkerConfig(rank=0, size=2, seed=0, device="cpu", model_options={"data_dir": root}))
>>> data = MNIST_data(verbose=False)
>>> data.batch_data(16)
>>> inputs, targets = next(data.batches_train)
>>> inputs.shape, inputs.dtype, targets.dtype, data.n_batch_train, data.n_batch_val
((16, 1, 28, 28), dtype('float32'), dtype('int32'), 4, 1)
>>> set_current(None)
"""

from __future__ import annotations

import itertools
import logging
import os
import zipfile
from pathlib import Path

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import open_regular
from theanompi.core.safe_load import NUMPY_ARRAY_GLOBALS, load_pickle
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.theanompi_api import session_config, session_data_dir

log = logging.getLogger(__name__)

NPZ_FILE, PICKLE_FILE = "mnist.npz", "mnist.pkl.gz"
N_PIXELS, N_CLASSES = 28 * 28, 10


def _check_pair(x, y, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 ``(N, 784)``, labels int32) checked; ConfigError naming ``where`` and the value."""
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "biuf" or x.ndim < 2 \
            or int(np.prod(x.shape[1:])) != N_PIXELS or x.shape[1:] not in ((784,), (28, 28), (1, 28, 28)):
        raise ConfigError(f"{where}: images of shape {getattr(x, 'shape', None)} and dtype "
                          f"{getattr(x, 'dtype', type(x).__name__)}; expected numbers of shape (N, 784), "
                          "(N, 28, 28) or (N, 1, 28, 28)")
    images = x.reshape(len(x), N_PIXELS)
    images = images.astype(np.float32) / np.float32(255.0) if x.dtype.kind in "biu" else images.astype(np.float32)
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(x) or (len(y) and y.dtype.kind not in "iu"):
        raise ConfigError(f"{where}: labels of shape {y.shape} and dtype {y.dtype} for {len(x)} images; "
                          "expected one integer per image")
    bad = np.flatnonzero((y < 0) | (y >= N_CLASSES))
    if len(bad):
        raise ConfigError(f"{where}: label {int(y[bad[0]])} at index {bad[0]} is outside 0..{N_CLASSES - 1}")
    return images, y.astype(np.int32)


def _load_npz(path: Path) -> list:
    raw = os.fdopen(open_regular(path, "MNIST file"), "rb")  # a FIFO or a device is refused (UnexpectedEntry)
    try:
        with raw, np.load(raw, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ConfigError(f"MNIST file '{path}' is not a readable .npz of numeric arrays ({e})") from None
    val = "test" if "x_val" not in arrays and "y_val" not in arrays and "x_test" in arrays else "val"
    pairs = []
    for split in ("train", val) + (("test",) if val == "val" and "x_test" in arrays else ()):
        if f"x_{split}" not in arrays or f"y_{split}" not in arrays:
            raise ConfigError(f"MNIST file '{path}' has no x_{split}/y_{split} (keys: {sorted(arrays)}); expected "
                              "x_train, y_train, x_val, y_val")
        pairs.append(_check_pair(arrays[f"x_{split}"], arrays[f"y_{split}"], f"MNIST file '{path}' ({split})"))
    return pairs


def _load_pickle(path: Path) -> list:
    content = load_pickle(path, NUMPY_ARRAY_GLOBALS, what="MNIST file", encoding="latin1", gzipped=True)
    if not isinstance(content, (tuple, list)) or len(content) not in (2, 3) \
            or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in content):
        raise ConfigError(f"MNIST file '{path}' holds a {type(content).__name__}; expected (train, valid[, test]) "
                          "pairs of (images, labels)")
    names = ("train", "valid", "test")
    return [_check_pair(x, y, f"MNIST file '{path}' ({names[i]})") for i, (x, y) in enumerate(content)]


def load_mnist(data_dir) -> list:
    """``[(x_train, y_train), (x_val, y_val)]`` (+ ``(x_test, y_test)`` if stored): float32 ``(N, 784)``, int32.

    Example
    -------
    >>> load_mnist("/nonexistent")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: MNIST directory '/nonexistent' holds neither mnist.npz nor mnist.pkl.gz
    """
    root = Path(data_dir)
    if (root / NPZ_FILE).is_file():
        return _load_npz(root / NPZ_FILE)
    if (root / PICKLE_FILE).is_file():
        return _load_pickle(root / PICKLE_FILE)
    raise ConfigError(f"MNIST directory '{root}' holds neither {NPZ_FILE} nor {PICKLE_FILE}")


class MNIST_data(ShardedArrayData):  # Theano-MPI's name
    """Theano-MPI's MNIST DataClass: ``batch_data(batchsize)``, then ``batches_train``/``batches_val``.

    Parameters
    ----------
    verbose : bool
        Log the batching at INFO level (else DEBUG).

    Attributes
    ----------
    channels, width, height, n_class : int
        1, 28, 28, 10.
    rawdata : list
        ``[x_train (N, 784) float32, y_train int32, x_val, y_val, img_mean (1, 784)]``
        (+ ``x_test, y_test`` when the file has them); ``img_mean`` is the mean of the
        training and validation means, as in Theano-MPI.
    batches_train, batches_val : generator
        Endless (inputs ``(B, 1, 28, 28)`` float32, targets int32) batches (after :meth:`batch_data`).
    n_batch_train, n_batch_val : int
        Batches of one pass on this rank.
    """

    channels, width, height, n_class = 1, 28, 28, N_CLASSES

    def __init__(self, verbose: bool = False):
        config = session_config("MNIST_data")
        self.verbose = bool(verbose)
        self.session_rank, self.session_size, self.session_seed = int(config.rank), int(config.size), int(config.seed)
        pairs = load_mnist(session_data_dir("MNIST_data"))
        (xt, yt), (xv, yv) = pairs[:2]
        img_mean = ((xt.mean(axis=0) + (xv.mean(axis=0) if len(xv) else xt.mean(axis=0))) / 2)[np.newaxis]
        self.rawdata = [xt, yt, xv, yv, img_mean.astype(np.float32)] + [a for pair in pairs[2:] for a in pair]
        self.batch_size = None  # type: ignore[assignment]  # Theano-MPI's API: None until batch_data(batchsize)

    def batch_data(self, batchsize: int) -> None:
        """Shard the images for this rank in batches of ``batchsize``; make the two generators.

        Only the first call counts (as in Theano-MPI); a later one with another size is an error.
        """
        if self.batch_size is not None:
            if batchsize != self.batch_size:
                raise ConfigError(f"MNIST_data.batch_data({batchsize!r}): already batched by {self.batch_size}")
            return
        xt, yt, xv, yv = (a.reshape((-1, 1, 28, 28)) if a.ndim == 2 else a for a in self.rawdata[:4])
        epoch = getattr(self, "epoch", 0)
        super().__init__(xt, yt, xv, yv, batchsize, self.session_rank, self.session_size, self.session_seed)
        if epoch:
            self.set_epoch(epoch)
        self.batches_train = self._endless_train()
        self.batches_val = self._endless_val()
        log.log(logging.INFO if self.verbose else logging.DEBUG, "MNIST rank %d: %d training, %d validation batches",
                self.rank, self.n_batch_train, self.n_batch_val)

    def set_epoch(self, epoch: int) -> None:
        """Select the common shuffle of ``epoch`` for ``train_batch`` (before :meth:`batch_data`: kept for it).

        ``batches_train`` keeps its own passes (a GAN draws many more batches per session epoch).
        """
        if self.batch_size is None:
            self.epoch = epoch
            return
        super().set_epoch(epoch)

    def shuffle_data(self) -> None:
        """Nothing to do (as in Theano-MPI): ``batches_train`` shuffles every pass."""

    def shard_data(self) -> None:
        """Nothing to do: :meth:`batch_data` already sharded by rank."""

    def _endless_train(self):
        for npass in itertools.count():
            order = self.epoch_order(npass)
            for count in range(self.n_batch_train):
                start = self.train_slot(count)
                yield self.load_train(order[start:start + self.units_per_batch], count)

    def _endless_val(self):
        if self.n_batch_val == 0:
            raise ConfigError(f"MNIST_data: rank {self.rank} has no validation images ({self.n_val_units} "
                              f"over {self.size} ranks)")
        while True:
            for count in range(self.n_batch_val):
                yield self.val_batch(count)
