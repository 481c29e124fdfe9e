"""The image classifiers' data options (cfg ``MODEL_*``) and the loaders they choose: framework-free.

:class:`ImageDataOptions` is what the pytensor zoo (:class:`theanompi.models.zoo.ImageClassifier`) and the
PyTorch/Keras models (``theanompi.models.keras_model_zoo.wresnet``) share: the option table, its launch-time
checks and :meth:`~ImageDataOptions.build_data`. It imports neither pytensor nor torch.

Options
-------
``data``
    ``digits`` (scikit-learn's 8x8 digits, 1x8x8, no download), ``cifar10``
    (``data_dir`` holds ``data_batch_1..5``/``test_batch``), ``synthetic``
    (``channels`` x ``input_size`` x ``input_size``, ``n_classes`` classes) or ``hickle``
    (``data_dir`` as below). Which ones a model accepts is its ``data_choices``.
``data_dir``
    Directory of the data set (``cifar10``, ``hickle``); checked at launch. Without it in the cfg,
    the environment's ``MODEL_DATA_DIR`` gives it (:func:`theanompi.launch.plan.resolve_data_dir`).
``train_size``, ``val_size``
    Use only the first images (0: all; ``synthetic``: 0 means 1024 / 256).
``input_size``
    ``synthetic``: image side (0: 32). ``hickle``: side of the square crop (0: the whole image).
    ``cifar10``: a side under 32 trains on random crops of that side and validates on the centre crop.
``channels``, ``n_classes``
    ``synthetic``/``hickle``; ``digits`` and ``cifar10`` have 10 classes.
``layout``, ``prefetch``
    ``hickle``: ``bchw`` or Theano-MPI's ``chwb``; ``prefetch=true`` loads the next
    batch in a background thread (any data).
``augment``
    In-memory images (``digits``, ``cifar10``, ``synthetic``): random crops of the image
    zero-padded by 1/8 of its side (or of the ``input_size`` crop), and horizontal flips
    (not for digits: use ``augment=crop``). ``false``/``crop``/``true``.
``lr_decay_epochs``, ``lr_decay``
    Step schedule: the learning rate is multiplied by ``lr_decay`` at each listed epoch
    (``"82,123"``; counted from 0; on top of ``LR_SCALING``).

The ``hickle`` directory (``data_dir``), the zoo's names or Theano-MPI's::

    train/ or train_hkl*/      batch files, HickleBatchData's format; a file of B images is one batch, or
                               B / batch_size sub-batches when MODEL_BATCH_SIZE divides B
    val/ or val_hkl*/          optional validation batch files
    labels/train_labels.npy, labels/val_labels.npy    only when the files hold bare image arrays
    img_mean.npy               optional mean image (C, H, W) or per-channel mean (also: mean.npy, misc/img_mean.npy)

Example
-------
>>> parse_int_list("82, 123"), augment_value("crop")
((82, 123), 'crop')
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.options import predicate_parser
from theanompi.models.data.base import ArraySpec, DataClass
from theanompi.models.data.cifar10 import Cifar10Data
from theanompi.models.data.digits import load_digits_split
from theanompi.models.data.hickle_batches import HickleBatchData
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.data.synthetic import SyntheticData

log = logging.getLogger(__name__)

DATA_KINDS = ("digits", "cifar10", "synthetic", "hickle")
MEAN_FILES = ("img_mean.npy", "mean.npy", "misc/img_mean.npy", "img_mean.hkl", "mean.hkl")


# ----- option parsers (name -> parser raising InvalidValue: theanompi.core.options' one style) -------
def is_int(v, minimum: int = 0) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and bool(v >= minimum)


def is_number(v, minimum: float = 0.0) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and v >= minimum


def parse_int_list(value) -> tuple[int, ...]:
    """``16`` or ``"16,32,64"`` (cfg text) or a list -> a tuple of ints; ``""`` -> ().

    Example
    -------
    >>> parse_int_list("82, 123"), parse_int_list(5), parse_int_list("")
    ((82, 123), (5,), ())
    """
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str):
        items = [v for v in value.replace(" ", "").split(",") if v != ""]
    else:
        items = [value]
    out = []
    for v in items:
        if isinstance(v, bool):
            raise ValueError(value)
        out.append(int(str(v)))
    return tuple(out)


def int_list_check(length: int | None = None, minimum: int = 1, allow_empty: bool = False):
    """A ``checks`` parser for comma lists of ints (exactly ``length`` of them when given)."""
    def check(value) -> bool:
        try:
            items = parse_int_list(value)
        except (ValueError, TypeError):
            return False
        if not items:
            return allow_empty
        return all(i >= minimum for i in items) and (length is None or len(items) == length)

    n = f"{length} " if length else ""
    example = ",".join(["16"] * (length or 2))
    return predicate_parser(check, f"a comma list of {n}integers >= {minimum} such as '{example}'")


def choice_check(*choices):
    """A ``checks`` parser accepting exactly one of ``choices``."""
    return predicate_parser(lambda v: v in choices, "one of: " + ", ".join(map(str, choices)))


def augment_value(v) -> str:
    return {False: "none", True: "crop_flip", "crop": "crop", "none": "none", "crop_flip": "crop_flip"}.get(v, "")


DATA_CHECKS = {
    "data": choice_check(*DATA_KINDS),
    "data_dir": predicate_parser(lambda v: isinstance(v, str), "a directory path"),
    "train_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: all)"),
    "val_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: all)"),
    "input_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: the data's own size)"),
    "channels": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
    "n_classes": predicate_parser(lambda v: is_int(v, 2), "an integer >= 2"),
    "layout": choice_check("bchw", "chwb"),
    "prefetch": predicate_parser(lambda v: isinstance(v, bool), "true or false"),
    "augment": predicate_parser(lambda v: augment_value(v) != "" if isinstance(v, (bool, str)) else False,
                                "false, crop or true (crop and flip)"),
    "lr_decay_epochs": int_list_check(minimum=1, allow_empty=True),
    "lr_decay": predicate_parser(lambda v: is_number(v) and 0 < v <= 1, "a number in (0, 1]"),
}

DATA_DEFAULTS = {
    "data": "digits", "data_dir": "", "train_size": 0, "val_size": 0, "input_size": 0, "channels": 3,
    "n_classes": 10, "layout": "bchw", "prefetch": False, "augment": False, "lr_decay_epochs": "", "lr_decay": 0.1,
}


def find_mean_file(root: Path) -> Path | None:
    """The first of :data:`MEAN_FILES` that exists under ``root`` (None if none)."""
    return next((root / name for name in MEAN_FILES if (root / name).is_file()), None)


def find_split(root: Path, split: str) -> Path | None:
    """``root/<split>`` (the zoo's name) or the one ``root/<split>_hkl*`` (Theano-MPI's); None if neither.

    Example
    -------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp()); (root / "train_hkl_b256").mkdir()
    >>> find_split(root, "train").name, find_split(root, "val")
    ('train_hkl_b256', None)
    """
    if (root / split).is_dir():
        return root / split
    found = sorted(p for p in root.glob(f"{split}_hkl*") if p.is_dir())
    if len(found) > 1:
        raise ConfigError(f"MODEL_DATA_DIR={str(root)!r} has several {split} folders "
                          f"({', '.join(p.name for p in found)}); keep one")
    return found[0] if found else None


def check_data_options(cls_name: str, hp: dict[str, Any], choices: tuple[str, ...]) -> None:
    """Cross-option checks of the data options (run at launch, before any rank starts)."""
    kind = hp["data"]
    if kind not in choices:
        raise ConfigError(f"{cls_name}: model option data={kind!r} is not allowed; use one of: {', '.join(choices)}")
    if kind in ("cifar10", "hickle"):
        if not hp["data_dir"]:
            raise ConfigError(f"{cls_name}: data={kind} needs MODEL_DATA_DIR (the data set's directory; in the cfg "
                              "or the environment); or use "
                              f"MODEL_DATA={'|'.join(c for c in choices if c not in ('cifar10', 'hickle'))}")
        root = Path(hp["data_dir"])
        if not root.is_dir():
            raise ConfigError(f"{cls_name}: MODEL_DATA_DIR={hp['data_dir']!r} is not a directory")
        if kind == "hickle" and find_split(root, "train") is None:
            raise ConfigError(f"{cls_name}: MODEL_DATA_DIR={hp['data_dir']!r} has no 'train' directory of "
                              "hickle batch files (expected train/ or Theano-MPI's train_hkl*/, optional val/, "
                              "labels/, img_mean.npy)")
    if kind in ("digits", "cifar10") and hp["n_classes"] != 10:
        raise ConfigError(f"{cls_name}: data={kind} has 10 classes; MODEL_N_CLASSES={hp['n_classes']} is not allowed")
    if kind == "digits" and hp["input_size"] not in (0, 8):
        raise ConfigError(f"{cls_name}: data=digits has 8x8 images; MODEL_INPUT_SIZE={hp['input_size']} is not allowed")
    if kind == "cifar10" and hp["input_size"] > 32:
        raise ConfigError(f"{cls_name}: data=cifar10 has 32x32 images; MODEL_INPUT_SIZE={hp['input_size']} "
                          "is not allowed (use 32, or less for crops)")
    if kind == "digits" and augment_value(hp["augment"]) == "crop_flip":
        raise ConfigError(f"{cls_name}: flipped digits are other symbols; use MODEL_AUGMENT=crop with data=digits")
    if kind == "hickle" and augment_value(hp["augment"]) != "none":
        raise ConfigError(f"{cls_name}: hickle batches are cropped and flipped by the loader (MODEL_INPUT_SIZE); "
                          "MODEL_AUGMENT is for in-memory images")


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


# ----- the options and the data, for a model class ---------------------------------------------
class ImageDataOptions:
    """Mixin of a ModelClass whose data the options above choose (before a ClassifierHyperParams base).

    Subclasses set :attr:`data_choices` (and their defaults: ``{**DATA_DEFAULTS, ...}``); ``self.hp`` and
    ``self.config`` are the model's; :attr:`data_dtype` is the float type of in-memory images.

    Example
    -------
    >>> from theanompi.models.hyperparams import ClassifierHyperParams
    >>> from theanompi.models.contract import WorkerConfig
    >>> class Digits(ImageDataOptions, ClassifierHyperParams):
    ...     defaults = {**ClassifierHyperParams.defaults, **DATA_DEFAULTS}
    ...     checks = dict(DATA_CHECKS)
    ...     def __init__(self, config):
    ...         self.config, self.hp = config, self.validate_options(config.model_options)
    >>> data = Digits(WorkerConfig(rank=0, size=2, seed=0, device="cpu0")).build_data()
    >>> data.input_shape, data.n_batch_train
    ((1, 8, 8), 24)
    """

    #: Values of the ``data`` option this model accepts.
    data_choices: tuple[str, ...] = DATA_KINDS
    #: dtype of in-memory images (the pytensor models: floatX)
    data_dtype: str = "float32"
    hp: dict[str, Any]
    config: Any

    @classmethod
    def validate_options(cls, model_options: dict[str, Any]) -> dict[str, Any]:
        hp = super().validate_options(model_options)  # type: ignore[misc]
        check_data_options(cls.__name__, hp, cls.data_choices)
        return hp

    def lr_multiplier(self, epoch_progress: float) -> float:
        """The base's multiplier (LR_SCALING) times ``lr_decay`` per passed ``lr_decay_epochs`` milestone."""
        passed = sum(1 for e in parse_int_list(self.hp["lr_decay_epochs"]) if epoch_progress >= e)
        return super().lr_multiplier(epoch_progress) * float(self.hp["lr_decay"]) ** passed  # type: ignore[misc]

    @property
    def n_outputs(self) -> int:
        """Classes of the data (the width of the output layer)."""
        return int(self.hp["n_classes"])

    def build_data(self):
        hp, c = self.hp, self.config
        kind = hp["data"]
        if kind == "digits":
            (xt, yt), (xv, yv) = load_digits_split(flat=False, dtype=self.data_dtype)
            data = self.shard(*subset(xt, yt, hp["train_size"]), *subset(xv, yv, hp["val_size"]))
        elif kind == "cifar10":
            data = Cifar10Data(hp["data_dir"], hp["batch_size"], c.rank, c.size, c.seed,
                               train_size=hp["train_size"] or None, val_size=hp["val_size"] or None)
        elif kind == "synthetic":
            side = hp["input_size"] or 32
            data = SyntheticData((hp["channels"], side, side), hp["n_classes"], hp["batch_size"], c.rank, c.size,
                                 c.seed, n_train=hp["train_size"] or 1024, n_val=hp["val_size"] or 256,
                                 dtype=self.data_dtype)
        else:
            data = self.build_hickle_data()
        augment = augment_value(hp["augment"])
        crop = hp["input_size"] if kind == "cifar10" and 0 < hp["input_size"] < 32 else None
        if augment != "none" or crop:
            data = AugmentedData(data, flip=augment == "crop_flip", crop=crop)
        if hp["prefetch"]:
            data = PrefetchData(data)
        return data

    def build_hickle_data(self):
        hp, c = self.hp, self.config
        root = Path(hp["data_dir"])
        labels = root / "labels"
        if hp["train_size"] or hp["val_size"]:
            raise ConfigError("MODEL_TRAIN_SIZE/MODEL_VAL_SIZE select images of in-memory data; with data=hickle "
                              "put fewer batch files in train/ and val/")

        def optional(path: Path):
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
