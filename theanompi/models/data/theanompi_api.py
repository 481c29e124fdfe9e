"""Theano-MPI's DataClass spelling (``batch_data``, ``extend_data``, ``shuffle_data``, ``shard_data``) on DataClass.

Theano-MPI's models drive their data through four calls and then read lists of
*file batches*::

    data.batch_data(file_batch_size)       # cut the sets into file batches
    data.extend_data(rank, size)           # pad the training list so it divides by size
    data.shuffle_data('train', common_seed=epoch)
    data.shard_data('train', rank, size)   # -> train_img_shard, train_labels_shard, n_batch_train

:class:`FileBatchAPI` implements them with :class:`~theanompi.models.data.base.DataClass`'s
sharding, one file batch being one unit: ``shuffle_data('train', common_seed=s)``
*is* ``set_epoch(s)``, the common permutation seeded by (session seed, ``s``),
padded by wrapping to ``n_batch_train * size``, and rank ``r``'s shard is its
``r::size`` slice (``train_indices``). Every rank computes the same order, so the
shards are disjoint apart from the padding, and ``n_batch_train`` is equal on
every rank. ``set_epoch`` (called by the session) and the model's own
``shuffle_data``/``shard_data`` compute the same thing, so calling both is harmless.

Where Theano-MPI differed (its bugs, or what it could not know):

* it shuffled with a time-based seed, ignoring ``common_seed`` (ranks disagreed
  and their shards overlapped);
* ``n_batch_train`` is this rank's count as soon as ``batch_data`` ran (Theano-MPI
  counted the whole set until ``shard_data``);
* validation is split into contiguous, disjoint shards without padding (ranks may
  differ by one file batch); Theano-MPI padded it, counting some batches twice;
* ``para_load`` is False: there is no spawned loading process.

The data directory and the seed come from the session (:func:`session_data_dir`,
:func:`session_config`), since the constructors take only ``verbose``.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.current_config import set_current
>>> class Letters(FileBatchAPI):
...     def __init__(self):
...         self.init_session("Letters", verbose=False)
...     def make_file_batches(self, file_batch_size):
...         return list("abcde"), list("ABCDE"), ["v"], ["V"]
>>> set_current(WorkerConfig(rank=1, size=2, seed=0, device="cpu"))
>>> d = Letters(); d.batch_data(1); d.extend_data(1, 2)
>>> d.shuffle_data("train", common_seed=3); d.shard_data("train", 1, 2)
>>> d.n_batch_train, len(d.train_img_ext), len(d.train_img_shard)
(3, 6, 3)
>>> set_current(None)
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.models import current_config
from theanompi.models.data.base import DataClass, check_shard_args

log = logging.getLogger(__name__)

MODES = ("train", "val")


# ----- the session ------------------------------------------------------------------------
def session_config(what: str):
    """This rank's :class:`~theanompi.models.contract.WorkerConfig`; ConfigError outside a session.

    Example
    -------
    >>> session_config("Cifar10_data")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: Cifar10_data finds its data in MODEL_DATA_DIR, but no theanompi session ...
    """
    config = current_config.current()
    if config is None:
        raise ConfigError(f"{what} finds its data in MODEL_DATA_DIR, but no theanompi session is running in this "
                          "process; construct it in a ModelClass started by a session with MODEL_DATA_DIR=<dir> in "
                          "its cfg (or model_options={'data_dir': ...}), or call "
                          "theanompi.models.current_config.set_current(WorkerConfig(...)) first")
    return config


def session_data_dir(what: str) -> Path:
    """The session's ``MODEL_DATA_DIR`` (``model_options['data_dir']``), checked to be a directory.

    Example
    -------
    >>> from theanompi.models.contract import WorkerConfig
    >>> current_config.set_current(WorkerConfig(rank=0, size=1, seed=0, device="cpu"))
    >>> session_data_dir("MNIST_data")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: MNIST_data finds its data in MODEL_DATA_DIR: set MODEL_DATA_DIR=<dir> in ...
    >>> current_config.set_current(None)
    """
    config = session_config(what)
    value = (config.model_options or {}).get("data_dir")
    if not value:
        raise ConfigError(f"{what} finds its data in MODEL_DATA_DIR: set MODEL_DATA_DIR=<dir> in the session's cfg "
                          "(or model_options={'data_dir': ...})")
    path = Path(value)
    if not path.is_dir():
        raise ConfigError(f"{what}: MODEL_DATA_DIR={str(value)!r} is not a directory")
    return path


_session_rngs: dict[str, tuple[object, np.random.Generator]] = {}


def session_rng(stream: str) -> np.random.Generator:
    """A generator for ``stream`` seeded by (session seed, rank, stream); it continues while the session lasts.

    Example
    -------
    >>> from theanompi.models.contract import WorkerConfig
    >>> current_config.set_current(WorkerConfig(rank=0, size=1, seed=5, device="cpu"))
    >>> a = session_rng("crop").integers(100, size=3)
    >>> current_config.set_current(WorkerConfig(rank=0, size=1, seed=5, device="cpu"))   # a new session
    >>> bool((session_rng("crop").integers(100, size=3) == a).all())
    True
    >>> current_config.set_current(None)
    """
    config = current_config.current()
    if config is None:
        raise ConfigError(f"random {stream} draws from the session's SEED, but no theanompi session is running in "
                          "this process; pass rng=np.random.default_rng(...) or call "
                          "theanompi.models.current_config.set_current(WorkerConfig(...)) first")
    owner, rng = _session_rngs.get(stream, (None, None))
    if owner is not config or rng is None:
        key = [int(config.seed), int(config.rank)] + [ord(ch) for ch in stream]
        rng = np.random.default_rng(key)
        _session_rngs[stream] = (config, rng)
    return rng


def _check_int(name: str, value, minimum: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name}={value!r} is not allowed; use an integer >= {minimum}")
    return int(value)


def split_into_batches(x, y, batch_size: int) -> tuple[list, list]:
    """Consecutive full batches of ``batch_size`` (views; the remainder is dropped, as Theano-MPI did).

    Example
    -------
    >>> xs, ys = split_into_batches(np.arange(7), np.arange(7) * 10, 3)
    >>> [b.tolist() for b in xs], ys[1].tolist()
    ([[0, 1, 2], [3, 4, 5]], [30, 40, 50])
    """
    n = len(x) // batch_size
    return ([x[k * batch_size:(k + 1) * batch_size] for k in range(n)],
            [y[k * batch_size:(k + 1) * batch_size] for k in range(n)])


# ----- the mixin --------------------------------------------------------------------------
class FileBatchAPI(DataClass):
    """Theano-MPI's ``batch_data``/``extend_data``/``shuffle_data``/``shard_data`` over file batches.

    A subclass calls :meth:`init_session` in its constructor and implements
    :meth:`make_file_batches`; the lists it returns are sharded as units of
    :class:`~theanompi.models.data.base.DataClass` (``load_train``/``load_val``
    remain the subclass's, for the project's ``train_batch`` spelling).

    Attributes
    ----------
    train_img, train_labels, val_img, val_labels : list
        All file batches (after :meth:`batch_data`).
    train_img_ext, train_labels_ext : list
        The training lists padded by wrapping to ``n_batch_train * size`` (after :meth:`extend_data`).
    train_img_shuffle, train_labels_shuffle : list
        The common order of the current epoch, padded (after :meth:`shuffle_data`/:meth:`set_epoch`).
    train_img_shard, train_labels_shard, val_img_shard, val_labels_shard : list
        This rank's file batches.
    para_load : bool
        Always False (no separate loading process).
    """

    para_load = False
    verbose = False
    file_batch_size: int | None = None
    train_img: list | None = None

    def init_session(self, what: str, verbose: bool) -> None:
        """Take rank, size and seed from the session's WorkerConfig (ConfigError outside a session)."""
        config = session_config(what)
        self.verbose = bool(verbose)
        self.session_rank, self.session_size = int(config.rank), int(config.size)
        self.session_seed = int(config.seed)

    def make_file_batches(self, file_batch_size: int) -> tuple[list, list, list, list]:
        """(train_img, train_labels, val_img, val_labels): the sets cut into file batches."""
        raise NotImplementedError

    def _say(self, message: str, *args) -> None:
        log.log(logging.INFO if self.verbose else logging.DEBUG, message, *args)

    def _require_batches(self, method: str) -> list:
        """The training file batches (ConfigError naming ``method`` before :meth:`batch_data` cut them)."""
        if self.train_img is None:
            raise ConfigError(f"{type(self).__name__}.{method} needs the file batches: call "
                              "batch_data(file_batch_size) first")
        return self.train_img

    # ----- Theano-MPI's calls ---------------------------------------------------------
    def batch_data(self, file_batch_size: int) -> None:
        """Cut the sets into file batches of ``file_batch_size`` and set up this rank's shards.

        Only the first call counts (as in Theano-MPI); a later one with another size is an error.
        """
        if self.train_img is not None:
            if file_batch_size != self.file_batch_size:
                raise ConfigError(f"{type(self).__name__}.batch_data({file_batch_size!r}): the data are already "
                                  f"cut into file batches of {self.file_batch_size}")
            return
        file_batch_size = _check_int("file_batch_size", file_batch_size, 1)
        train_img, train_labels, val_img, val_labels = self.make_file_batches(file_batch_size)
        if not train_img:
            raise ConfigError(f"{type(self).__name__}: file_batch_size={file_batch_size} leaves no training batch")
        epoch = getattr(self, "epoch", 0)
        self.train_img, self.train_labels = list(train_img), list(train_labels)
        self.val_img, self.val_labels = list(val_img), list(val_labels)
        self.file_batch_size = file_batch_size
        self._setup(self.session_rank, self.session_size, epoch)
        self._say("%s: %d training and %d validation file batches of %d", type(self).__name__,
                  len(self.train_img), len(self.val_img), file_batch_size)

    def extend_data(self, rank: int, size: int) -> None:
        """Pad the training file batches by wrapping so that ``size`` ranks get ``n_batch_train`` each."""
        train_img = self._require_batches("extend_data")
        self._bind(rank, size)
        padded = np.resize(np.arange(len(train_img)), self.n_batch_train * self.size)
        self.train_img_ext = [train_img[i] for i in padded]
        self.train_labels_ext = [self.train_labels[i] for i in padded]
        self.val_img_ext, self.val_labels_ext = list(self.val_img), list(self.val_labels)

    def shuffle_data(self, mode: str = "train", common_seed: int = 1234) -> None:
        """``'train'``: the common order seeded by (session seed, ``common_seed``), i.e. ``set_epoch(common_seed)``;
        ``'val'``: validation keeps its order."""
        self._require_batches("shuffle_data")
        if mode == "train":
            self.set_epoch(_check_int("common_seed", common_seed, 0))
            self._say("training file batches shuffled with common_seed %d", common_seed)
        elif mode == "val":
            self.val_img_shuffle, self.val_labels_shuffle = list(self.val_img), list(self.val_labels)
        else:
            raise ConfigError(f"mode={mode!r} is not allowed; use one of: {', '.join(MODES)}")

    def shard_data(self, mode: str, rank: int, size: int) -> None:
        """This rank's file batches: ``train_img_shard``/``val_img_shard`` and their labels."""
        self._require_batches("shard_data")
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r} is not allowed; use one of: {', '.join(MODES)}")
        self._bind(rank, size)
        if mode == "train":
            self._shard_train()
            self._say("rank %d: %d training file batches", self.rank, self.n_batch_train)
        else:
            self.val_img_shard = [self.val_img[i] for i in self.val_indices]
            self.val_labels_shard = [self.val_labels[i] for i in self.val_indices]
            self._say("rank %d: %d validation file batches", self.rank, self.n_batch_val)

    # ----- the project's call -------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the common shuffle of ``epoch`` and this rank's shard (what shuffle_data + shard_data do)."""
        epoch = _check_int("epoch", epoch, 0)
        if getattr(self, "n_train_units", None) is None:
            self.epoch = epoch  # no shards yet: batch_data applies it
            return
        super().set_epoch(epoch)
        if self.train_img is not None:
            self._shard_train()

    # ----- helpers ----------------------------------------------------------------------
    def _setup(self, rank: int, size: int, epoch: int) -> None:
        assert self.train_img is not None  # batch_data cut them
        self.setup_shards(len(self.train_img), len(self.val_img), 1, rank, size, self.session_seed,
                          unit="files_per_batch")
        if epoch != self.epoch:
            self.set_epoch(epoch)

    def _bind(self, rank: int, size: int) -> None:
        """Shard for ``rank`` of ``size`` (the session's, normally; another pair re-shards, same epoch)."""
        check_shard_args(1, rank, size, "files_per_batch")
        if (rank, size) != (self.rank, self.size):
            self._setup(int(rank), int(size), self.epoch)

    def _shard_train(self) -> None:
        assert self.train_img is not None  # batch_data cut them
        order = self._order
        self.train_img_shuffle = [self.train_img[i] for i in order]
        self.train_labels_shuffle = [self.train_labels[i] for i in order]
        self.train_img_shard = self.train_img_shuffle[self.rank::self.size]
        self.train_labels_shard = self.train_labels_shuffle[self.rank::self.size]
