"""The loaders the image data options choose (:mod:`theanompi.models.data.image_options`): framework-free.

:func:`build_image_data` builds a model's DataClass from its parsed options: the in-memory digits, CIFAR-10 or
synthetic images (optionally cropped and flipped by :class:`AugmentedData`), or hickle batch files (split into
steps by :class:`SubBatchData` when ``MODEL_BATCH_SIZE`` divides a file's images), behind a :class:`PrefetchData`
thread with ``prefetch=true``. It imports neither pytensor nor torch.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.data.base import ShardedArrayData
>>> from theanompi.models.data.image_options import IMAGE_DATA_OPTIONS
>>> hp = {**{opt.name: opt.default for opt in IMAGE_DATA_OPTIONS}, "train_size": 64, "augment": "crop"}
>>> def shard(*arrays): return ShardedArrayData(*arrays, batch_size=16, rank=0, size=2, seed=0)
>>> data = build_image_data(hp, WorkerConfig(rank=0, size=2, seed=0, device="cpu0"), shard, "float32")
>>> type(data).__name__, data.input_shape, data.n_batch_train
('AugmentedData', (1, 8, 8), 2)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.models.data.base import ArraySpec, DataClass
from theanompi.models.data.cifar10 import Cifar10Data
from theanompi.models.data.digits import load_digits_split
from theanompi.models.data.hickle_batches import HickleBatchData
from theanompi.models.data.image_options import augment_value, find_split
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.data.synthetic import SyntheticData

log = logging.getLogger(__name__)

MEAN_FILES = ("img_mean.npy", "mean.npy", "misc/img_mean.npy", "img_mean.hkl", "mean.hkl")


def find_mean_file(root: Path) -> Path | None:
    """The first of :data:`MEAN_FILES` that exists under ``root`` (None if none)."""
    return next((root / name for name in MEAN_FILES if (root / name).is_file()), None)


# ----- data wrappers ------------------------------------------------------------------------------
class AugmentedData:
    """Random crops and horizontal flips of an in-memory image DataClass's training batches, seeded by
    (seed, epoch, batch slot): every run and rank count sees the same.

    The crop is ``crop`` pixels square (default: the image's side) taken from the image zero-padded by
    ``pad`` pixels (default: 1/8 of the side for crops of the image's size, none for smaller crops);
    validation batches are the centre crop (unpadded).

    Example
    -------
    >>> from theanompi.models.data.synthetic import SyntheticData
    >>> base = SyntheticData((3, 8, 8), 2, batch_size=4, rank=0, size=1, seed=0, n_train=8, n_val=4)
    >>> data = AugmentedData(base, flip=True)
    >>> data.train_batch(0)[0].shape, data.n_batch_train, data.pad
    ((4, 3, 8, 8), 2, 1)
    >>> crops = AugmentedData(base, flip=True, pad=0, crop=6)
    >>> crops.train_batch(0)[0].shape, crops.val_batch(0)[0].shape, crops.input_shape
    ((4, 3, 6, 6), (4, 3, 6, 6), (3, 6, 6))
    """

    def __init__(self, data: DataClass, flip: bool = True, pad: int | None = None, crop: int | None = None):
        self.data = data
        self.flip = bool(flip)
        side = min(data.x_train.shape[2:])
        self.crop = int(crop or side)
        if not 1 <= self.crop <= side:
            raise ConfigError(f"crop={crop!r} is not allowed; use a side in 1..{side}")
        self.pad = (max(1, side // 8) if self.crop == side else 0) if pad is None else int(pad)
        self.x_train = ArraySpec(data.x_train.shape[:2] + (self.crop, self.crop), data.x_train.dtype)

    def __getattr__(self, name):
        if name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)

    @property
    def input_shape(self) -> tuple:
        return tuple(self.x_train.shape[1:])

    def train_batch(self, count: int):
        x, y = self.data.train_batch(count)
        rng = np.random.default_rng([self.data.seed, self.data.epoch, self.data.train_slot(count), 7])
        p, c = self.pad, self.crop
        b, _, h, w = x.shape
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        oy, ox = rng.integers(0, h + 2 * p - c + 1, b), rng.integers(0, w + 2 * p - c + 1, b)
        flips = rng.random(b) < 0.5 if self.flip else np.zeros(b, bool)
        out = np.empty(x.shape[:2] + (c, c), x.dtype)
        for i in range(b):
            v = padded[i, :, oy[i]:oy[i] + c, ox[i]:ox[i] + c]
            out[i] = v[:, :, ::-1] if flips[i] else v
        return out, y

    def val_batch(self, count: int):
        x, y = self.data.val_batch(count)
        c = self.crop
        oy, ox = (x.shape[2] - c) // 2, (x.shape[3] - c) // 2
        return (x if c == x.shape[2] == x.shape[3] else np.ascontiguousarray(x[:, :, oy:oy + c, ox:ox + c])), y

    def set_epoch(self, epoch: int) -> None:
        self.data.set_epoch(epoch)

    def close(self) -> None:
        self.data.close()


class SubBatchData:
    """A file-batch DataClass whose batches (files of ``B`` images) are split into ``n_subb`` sub-batches of
    ``B / n_subb`` images, each one training step (Theano-MPI's ``file_batch_size // batch_size`` sub-batches).
    The current file is read once for its sub-batches.

    Example
    -------
    >>> from theanompi.models.data.synthetic import SyntheticData
    >>> base = SyntheticData((2,), 2, batch_size=8, rank=0, size=1, seed=0, n_train=16, n_val=8)
    >>> data = SubBatchData(base, 4)
    >>> data.n_batch_train, data.n_batch_val, data.batch_size, data.train_batch(5)[0].shape
    (8, 4, 2, (2, 2))
    >>> np.array_equal(data.train_batch(5)[0], base.train_batch(1)[0][2:4])
    True
    """

    #: a resume inside an epoch counts the wrapped loader's units, not sub-batches: not offered
    start_at = None

    def __init__(self, data, n_subb: int):
        self.data = data
        self.n_subb = int(n_subb)
        if self.n_subb < 1 or data.batch_size % self.n_subb:
            raise ConfigError(f"{data.batch_size} images per file cannot be split into {n_subb} sub-batches")
        self.batch_size = data.batch_size // self.n_subb
        self._cached: tuple | None = None  # (kind, epoch, file count) -> its batch

    def __getattr__(self, name):
        if name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)

    @property
    def n_batch_train(self) -> int:
        return int(self.data.n_batch_train) * self.n_subb

    @property
    def n_batch_val(self) -> int:
        return int(self.data.n_batch_val) * self.n_subb

    def _part(self, kind: str, count: int):
        file_count, part = divmod(count, self.n_subb)
        key = (kind, self.data.epoch, file_count)
        if self._cached is None or self._cached[0] != key:
            load = self.data.train_batch if kind == "train" else self.data.val_batch
            self._cached = (key, load(file_count))
        x, y = self._cached[1]
        b = self.batch_size
        return x[part * b:(part + 1) * b], y[part * b:(part + 1) * b]

    def train_batch(self, count: int):
        return self._part("train", count)

    def val_batch(self, count: int):
        return self._part("val", count)

    def set_epoch(self, epoch: int) -> None:
        self._cached = None
        self.data.set_epoch(epoch)

    def close(self) -> None:
        self._cached = None
        self.data.close()


def subset(x, y, n: int):
    return (x, y) if not n else (x[:n], y[:n])


# ----- the data the options choose ---------------------------------------------------------------
def build_image_data(hp: dict[str, Any], config: Any, shard: Callable[..., Any], dtype: str) -> Any:
    """The loader of a model's parsed options ``hp`` for worker ``config``; ``shard(x_train, y_train, x_val,
    y_val)`` is the model's sharding of in-memory arrays (:meth:`ClassifierHyperParams.shard
    <theanompi.models.hyperparams.ClassifierHyperParams.shard>`), ``dtype`` the float type of in-memory images."""
    c, kind = config, hp["data"]
    if kind == "digits":
        (xt, yt), (xv, yv) = load_digits_split(flat=False, dtype=dtype)
        data = shard(*subset(xt, yt, hp["train_size"]), *subset(xv, yv, hp["val_size"]))
    elif kind == "cifar10":
        data = Cifar10Data(hp["data_dir"], hp["batch_size"], c.rank, c.size, c.seed,
                           train_size=hp["train_size"] or None, val_size=hp["val_size"] or None)
    elif kind == "synthetic":
        side = hp["input_size"] or 32
        data = SyntheticData((hp["channels"], side, side), hp["n_classes"], hp["batch_size"], c.rank, c.size,
                             c.seed, n_train=hp["train_size"] or 1024, n_val=hp["val_size"] or 256, dtype=dtype)
    else:
        data = build_hickle_data(hp, c)
    augment = augment_value(hp["augment"])
    crop = hp["input_size"] if kind == "cifar10" and 0 < hp["input_size"] < 32 else None
    if augment != "none" or crop:
        data = AugmentedData(data, flip=augment == "crop_flip", crop=crop)
    if hp["prefetch"]:
        data = PrefetchData(data)
    return data


def build_hickle_data(hp: dict[str, Any], config: Any) -> Any:
    """The hickle batch files of ``hp["data_dir"]`` (see :mod:`theanompi.models.data.image_options`), in steps of
    ``hp["batch_size"]`` images."""
    c = config
    root = Path(hp["data_dir"])
    labels = root / "labels"
    if hp["train_size"] or hp["val_size"]:
        raise ConfigError("MODEL_TRAIN_SIZE/MODEL_VAL_SIZE select images of in-memory data; with data=hickle "
                          "put fewer batch files in train/ and val/")

    def optional(path: Path) -> Path | None:
        return path if path.exists() else None

    train_dir = find_split(root, "train")
    data = HickleBatchData(train_dir, c.rank, c.size, c.seed, val_dir=find_split(root, "val"),
                           train_labels=optional(labels / "train_labels.npy"),
                           val_labels=optional(labels / "val_labels.npy"), mean_file=find_mean_file(root),
                           layout=hp["layout"], crop_size=hp["input_size"] or None, n_classes=hp["n_classes"])
    batch = hp["batch_size"]
    if batch < data.batch_size:
        if data.batch_size % batch:
            raise ConfigError(f"MODEL_BATCH_SIZE={batch} does not divide the {data.batch_size} images of each "
                              f"file in {str(train_dir)!r}; use a divisor of {data.batch_size}")
        return SubBatchData(data, data.batch_size // batch)
    return data
