"""The image classifiers' data options (cfg ``MODEL_*``) and their checks at launch: framework-free.

:data:`IMAGE_DATA_OPTIONS` are declared once, as every ModelClass declares its options
(:mod:`theanompi.models.model_options`); :class:`theanompi.models.hyperparams.ImageClassifierHyperParams` holds them
for the pytensor zoo and the Keras Wide ResNet, and :mod:`theanompi.models.data.image_loaders` builds the loaders
they choose.

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
>>> [opt.name for opt in IMAGE_DATA_OPTIONS][:3], augment("crop"), augment_value(True)
(['data', 'data_dir', 'train_size'], 'crop', 'crop_flip')
>>> check_data_options("Net", {"data": "digits", "n_classes": 10, "input_size": 0, "augment": True}, DATA_KINDS)
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: Net: flipped digits are other symbols; use MODEL_AUGMENT=crop with data=digits
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theanompi.core.errors import ConfigError
from theanompi.core.options import (
    InvalidValue,
    boolean,
    choice,
    directory_path,
    fraction,
    int_at_least,
    int_list,
    model_option,
    non_negative_int,
    positive_int,
)

DATA_KINDS = ("digits", "cifar10", "synthetic", "hickle")


@dataclass(frozen=True)
class DataKind:
    """The ``data`` option's parser for a model that takes the kinds ``choices`` (of :data:`DATA_KINDS`).

    >>> DataKind(("cifar10", "synthetic"))("CIFAR10"), DataKind(("cifar10", "synthetic")).accepts
    ('cifar10', 'one of: cifar10, synthetic')
    >>> DataKind(("cifar10", "synthetic"))("digits")
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use one of: cifar10, synthetic
    """

    choices: tuple[str, ...] = DATA_KINDS

    @property
    def accepts(self) -> str:
        return "one of: " + ", ".join(self.choices)

    def __call__(self, value: Any) -> str:
        kind = choice(*DATA_KINDS)(value)
        if kind not in self.choices:
            raise InvalidValue(f"use {self.accepts}")
        return kind


def augment_value(v: Any) -> str:
    """An ``augment`` value's meaning: ``none``, ``crop`` or ``crop_flip`` ('' for a value it does not take)."""
    if not isinstance(v, (bool, str)):
        return ""
    return {False: "none", True: "crop_flip", "crop": "crop", "none": "none", "crop_flip": "crop_flip"}.get(v, "")


def augment(value: Any) -> Any:
    """The ``augment`` option's parser: the value as given, when :func:`augment_value` knows it."""
    if augment_value(value) == "":
        raise InvalidValue("use false, crop or true (crop and flip)")
    return value


IMAGE_DATA_OPTIONS = (
    model_option("data", DataKind(), "digits",
                 "the data set: digits (no download), cifar10 (MODEL_DATA_DIR), synthetic, hickle (MODEL_DATA_DIR)"),
    model_option("data_dir", directory_path, "",
                 "directory of the cifar10 or hickle data set (default: the environment's MODEL_DATA_DIR)"),
    model_option("train_size", non_negative_int, 0, "use only the first training images (0: all)"),
    model_option("val_size", non_negative_int, 0, "use only the first validation images (0: all)"),
    model_option("input_size", non_negative_int, 0,
                 "synthetic: image side (0: 32); hickle: side of the square crop (0: the whole image); cifar10: a "
                 "side under 32 trains on random crops and validates on the centre crop"),
    model_option("channels", positive_int, 3, "image channels of synthetic data"),
    model_option("n_classes", int_at_least(2), 10, "classes of synthetic or hickle data (digits, cifar10: 10)"),
    model_option("layout", choice("bchw", "chwb"), "bchw", "how hickle files hold images (chwb: Theano-MPI's)"),
    model_option("prefetch", boolean, False, "load the next batch in a background thread"),
    model_option("augment", augment, False,
                 "in-memory images: random crops of the zero-padded image (crop), and horizontal flips (true)"),
    model_option("lr_decay_epochs", int_list(minimum=1, allow_empty=True), "",
                 "epochs (from 0) at which the learning rate is multiplied by lr_decay, e.g. 82,123"),
    model_option("lr_decay", fraction, 0.1, "the step schedule's factor"),
)


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
