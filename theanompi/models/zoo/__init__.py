"""The model zoo: ready-made ModelClasses built with :mod:`theanompi.models.layers`.

``MODELFILE=theanompi.models.zoo.<module>``, ``MODELCLASS=<class>``:

* ``cifar10_cnn.CifarCNN``: conv32-pool-conv64-pool-dense10 (the CNN benchmark net)
* ``resnet.ResNet`` (``ResNet20``, ``ResNet32``): CIFAR ResNet (He et al. 2016), depth 6n+2,
  batch norm, shortcuts A/B; ResNet-32 has 464,154 parameters (Multiverso's benchmark)
* ``alexnet.AlexNet``: AlexNet-style net on ImageNet-style hickle batch files
* ``vgg.VGG``: VGG-11/13/16/19 (optionally with batch norm) on hickle batch files
* ``lstm.LSTMClassifier``: LSTM sequence classifier (digits as 8 rows of 8 pixels)
* ``wgan.WGAN``: Wasserstein GAN (critic + generator) on the digits images

Every model validates its ``MODEL_*`` options before any rank starts, initialises
its parameters from ``SEED`` (:func:`theanompi.models.layers.init.set_rng`, so all
ranks start identical) and runs under every rule (BSP ``cdd``/``avg``, EASGD,
GOSGD, ASGD).

This module holds what the image classifiers share: :class:`ImageClassifier`
(data options and loaders, the network as a layer graph, deterministic
validation logits, step learning-rate decay) and :func:`rank_dropout` (dropout
masks that differ between ranks).

Data options of the image classifiers (cfg ``MODEL_*``)
-------------------------------------------------------
``data``
    ``digits`` (scikit-learn's 8x8 digits, 1x8x8, no download), ``cifar10``
    (``data_dir`` holds ``data_batch_1..5``/``test_batch``), ``synthetic``
    (``channels`` x ``input_size`` x ``input_size``, ``n_classes`` classes) or ``hickle``
    (``data_dir`` as below). Which ones a model accepts is its ``data_choices``.
``data_dir``
    Directory of the data set (``cifar10``, ``hickle``); checked at launch.
``train_size``, ``val_size``
    Use only the first images (0: all; ``synthetic``: 0 means 1024 / 256).
``input_size``
    ``synthetic``: image side (0: 32). ``hickle``: side of the square crop (0: the whole image).
``channels``, ``n_classes``
    ``synthetic``/``hickle``; ``digits`` and ``cifar10`` have 10 classes.
``layout``, ``prefetch``
    ``hickle``: ``bchw`` or Theano-MPI's ``chwb``; ``prefetch=true`` loads the next
    batch in a background thread (any data).
``augment``
    In-memory images (``digits``, ``cifar10``, ``synthetic``): random crops of the image
    zero-padded by 1/8 of its side, and horizontal flips (not for digits: use
    ``augment=crop``). ``false``/``crop``/``true``.
``lr_decay_epochs``, ``lr_decay``
    Step schedule: the learning rate is multiplied by ``lr_decay`` at each listed epoch
    (``"82,123"``; counted from 0; on top of ``LR_SCALING``).

The ``hickle`` directory (``data_dir``)::

    train/            batch files (one file = one rank batch), HickleBatchData's format
    val/              optional validation batch files
    labels/train_labels.npy, labels/val_labels.npy    only when the files hold bare image arrays
    img_mean.npy      optional mean image (C, H, W) or per-channel mean (also: mean.npy, misc/img_mean.npy)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytensor

import theanompi.models.layers as L
from theanompi.core.errors import ConfigError
from theanompi.core.options import predicate_parser
from theanompi.models.base import ClassifierModel
from theanompi.models.data.base import DataClass
from theanompi.models.data.cifar10 import Cifar10Data
from theanompi.models.data.digits import load_digits_split
from theanompi.models.data.hickle_batches import HickleBatchData
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.data.synthetic import SyntheticData

#: MODELCLASS -> MODELFILE of every zoo model.
MODELS = {
    "CifarCNN": "theanompi.models.zoo.cifar10_cnn",
    "ResNet": "theanompi.models.zoo.resnet",
    "ResNet20": "theanompi.models.zoo.resnet",
    "ResNet32": "theanompi.models.zoo.resnet",
    "AlexNet": "theanompi.models.zoo.alexnet",
    "VGG": "theanompi.models.zoo.vgg",
    "LSTMClassifier": "theanompi.models.zoo.lstm",
    "WGAN": "theanompi.models.zoo.wgan",
}

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


def check_data_options(cls_name: str, hp: dict[str, Any], choices: tuple[str, ...]) -> None:
    """Cross-option checks of the data options (run at launch, before any rank starts)."""
    kind = hp["data"]
    if kind not in choices:
        raise ConfigError(f"{cls_name}: model option data={kind!r} is not allowed; use one of: {', '.join(choices)}")
    if kind in ("cifar10", "hickle"):
        if not hp["data_dir"]:
            raise ConfigError(f"{cls_name}: data={kind} needs MODEL_DATA_DIR (the data set's directory); "
                              f"or use MODEL_DATA={'|'.join(c for c in choices if c not in ('cifar10', 'hickle'))}")
        root = Path(hp["data_dir"])
        if not root.is_dir():
            raise ConfigError(f"{cls_name}: MODEL_DATA_DIR={hp['data_dir']!r} is not a directory")
        if kind == "hickle" and not (root / "train").is_dir():
            raise ConfigError(f"{cls_name}: MODEL_DATA_DIR={hp['data_dir']!r} has no 'train' directory of "
                              "hickle batch files (expected train/, optional val/, labels/, img_mean.npy)")
    if kind in ("digits", "cifar10") and hp["n_classes"] != 10:
        raise ConfigError(f"{cls_name}: data={kind} has 10 classes; MODEL_N_CLASSES={hp['n_classes']} is not allowed")
    if kind == "digits" and hp["input_size"] not in (0, 8):
        raise ConfigError(f"{cls_name}: data=digits has 8x8 images; MODEL_INPUT_SIZE={hp['input_size']} is not allowed")
    if kind == "cifar10" and hp["input_size"] not in (0, 32):
        raise ConfigError(f"{cls_name}: data=cifar10 has 32x32 images; MODEL_INPUT_SIZE={hp['input_size']} "
                          "is not allowed")
    if kind == "digits" and augment_value(hp["augment"]) == "crop_flip":
        raise ConfigError(f"{cls_name}: flipped digits are other symbols; use MODEL_AUGMENT=crop with data=digits")
    if kind == "hickle" and augment_value(hp["augment"]) != "none":
        raise ConfigError(f"{cls_name}: hickle batches are cropped and flipped by the loader (MODEL_INPUT_SIZE); "
                          "MODEL_AUGMENT is for in-memory images")


# ----- data -----------------------------------------------------------------------------------
class AugmentedData:
    """Random crops (of the zero-padded image) and horizontal flips of an in-memory image DataClass's
    training batches, seeded by (seed, epoch, batch slot): every run and rank count sees the same.

    Example
    -------
    >>> from theanompi.models.data.synthetic import SyntheticData
    >>> base = SyntheticData((3, 8, 8), 2, batch_size=4, rank=0, size=1, seed=0, n_train=8, n_val=4)
    >>> data = AugmentedData(base, flip=True)
    >>> data.train_batch(0)[0].shape, data.n_batch_train, data.pad
    ((4, 3, 8, 8), 2, 1)
    """

    def __init__(self, data: DataClass, flip: bool = True, pad: int | None = None):
        self.data = data
        self.flip = bool(flip)
        side = min(data.x_train.shape[2:])
        self.pad = max(1, side // 8) if pad is None else int(pad)

    def __getattr__(self, name):
        if name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)

    def train_batch(self, count: int):
        x, y = self.data.train_batch(count)
        rng = np.random.default_rng([self.data.seed, self.data.epoch, self.data.train_slot(count), 7])
        p = self.pad
        b, _, h, w = x.shape
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        oy, ox = rng.integers(0, 2 * p + 1, b), rng.integers(0, 2 * p + 1, b)
        flips = rng.random(b) < 0.5 if self.flip else np.zeros(b, bool)
        out = np.empty_like(x)
        for i in range(b):
            v = padded[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w]
            out[i] = v[:, :, ::-1] if flips[i] else v
        return out, y

    def val_batch(self, count: int):
        return self.data.val_batch(count)

    def set_epoch(self, epoch: int) -> None:
        self.data.set_epoch(epoch)

    def close(self) -> None:
        self.data.close()


def subset(x, y, n: int):
    return (x, y) if not n else (x[:n], y[:n])


class ImageClassifier(ClassifierModel):
    """A ClassifierModel whose network is a layer graph and whose data is chosen by the data options.

    Subclasses set :attr:`data_choices` and implement :meth:`build_layers` (the input
    layer -> the output layer, logits, no softmax). :meth:`build_network` seeds
    :func:`theanompi.models.layers.init.set_rng` from ``config.seed``, keeps the output
    layer in ``self.network`` (so ``sync_state`` pools batch-norm statistics) and
    returns the trainable params, the training logits and the deterministic
    validation logits (batch norm on running statistics, dropout off).

    Example
    -------
    >>> import theanompi.models.layers as L
    >>> class Linear(ImageClassifier):
    ...     data_choices = ("digits", "synthetic")
    ...     def build_layers(self, net):
    ...         return L.DenseLayer(net, self.n_outputs, nonlinearity=None)
    >>> from theanompi.models.contract import WorkerConfig
    >>> m = Linear(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    >>> [p.name for p in m.params], m.data.input_shape
    (['W', 'b'], (1, 8, 8))
    """

    defaults = {**ClassifierModel.defaults, **DATA_DEFAULTS}
    checks = dict(DATA_CHECKS)
    #: Values of the ``data`` option this model accepts.
    data_choices: tuple[str, ...] = DATA_KINDS

    @classmethod
    def validate_options(cls, model_options: dict[str, Any]) -> dict[str, Any]:
        hp = super().validate_options(model_options)
        check_data_options(cls.__name__, hp, cls.data_choices)
        return hp

    # ----- data -------------------------------------------------------------------------
    @property
    def n_outputs(self) -> int:
        """Classes of the data (the width of the output layer)."""
        return int(self.hp["n_classes"])

    def build_data(self):
        hp, c = self.hp, self.config
        floatX = pytensor.config.floatX
        kind = hp["data"]
        if kind == "digits":
            (xt, yt), (xv, yv) = load_digits_split(flat=False, dtype=floatX)
            data = self.shard(*subset(xt, yt, hp["train_size"]), *subset(xv, yv, hp["val_size"]))
        elif kind == "cifar10":
            data = Cifar10Data(hp["data_dir"], hp["batch_size"], c.rank, c.size, c.seed,
                               train_size=hp["train_size"] or None, val_size=hp["val_size"] or None)
        elif kind == "synthetic":
            side = hp["input_size"] or 32
            data = SyntheticData((hp["channels"], side, side), hp["n_classes"], hp["batch_size"], c.rank, c.size,
                                 c.seed, n_train=hp["train_size"] or 1024, n_val=hp["val_size"] or 256,
                                 dtype=floatX)
        else:
            data = self.build_hickle_data()
        augment = augment_value(hp["augment"])
        if augment != "none":
            data = AugmentedData(data, flip=augment == "crop_flip")
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

        data = HickleBatchData(root / "train", c.rank, c.size, c.seed, val_dir=optional(root / "val"),
                               train_labels=optional(labels / "train_labels.npy"),
                               val_labels=optional(labels / "val_labels.npy"), mean_file=find_mean_file(root),
                               layout=hp["layout"], crop_size=hp["input_size"] or None, n_classes=hp["n_classes"])
        return data

    # ----- network ----------------------------------------------------------------------
    def build_layers(self, net):
        """The network on top of the input layer ``net``; returns the output layer (logits)."""
        raise NotImplementedError

    def build_network(self, x, rng):
        L.init.set_rng(rng)  # seeded from config.seed: identical networks on every rank
        self._dropouts = 0
        l_in = L.InputLayer((None,) + tuple(self.data.x_train.shape[1:]), input_var=x, name="input")
        self.network = self.build_layers(l_in)
        params = L.get_all_params(self.network, trainable=True)
        return params, L.get_output(self.network), L.get_output(self.network, deterministic=True)

    def dropout(self, incoming, p: float):
        """A DropoutLayer whose masks differ between ranks (see :func:`rank_dropout`)."""
        self._dropouts += 1
        return rank_dropout(incoming, p, self.config, self._dropouts)

    # ----- learning rate ------------------------------------------------------------------
    def lr_multiplier(self, epoch_progress: float) -> float:
        """LR_SCALING's multiplier times ``lr_decay`` per passed ``lr_decay_epochs`` milestone."""
        passed = sum(1 for e in parse_int_list(self.hp["lr_decay_epochs"]) if epoch_progress >= e)
        return super().lr_multiplier(epoch_progress) * float(self.hp["lr_decay"]) ** passed


def rank_dropout(incoming, p: float, config, index: int):
    """A :class:`~theanompi.models.layers.DropoutLayer` whose random generator is seeded by
    (``config.seed``, ``config.rank``, ``index``): different masks on every rank (each
    worker sees other samples), reproducible runs, and the initializers' generator
    (the parameters, identical on every rank) is left untouched.

    Example
    -------
    >>> from theanompi.models.contract import WorkerConfig
    >>> a = rank_dropout((None, 4), 0.5, WorkerConfig(rank=0, size=2, seed=0, device="cpu0"), 1)
    >>> b = rank_dropout((None, 4), 0.5, WorkerConfig(rank=1, size=2, seed=0, device="cpu1"), 1)
    >>> a._seed != b._seed
    True
    """
    saved = L.init.get_rng()
    L.init.set_rng(np.random.default_rng([int(config.seed), int(config.rank), int(index), 3]))
    try:
        return L.DropoutLayer(incoming, p=p, name=f"dropout{index}")
    finally:
        L.init.set_rng(saved)
