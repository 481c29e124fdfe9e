"""ImageNet-style directories of hickle batch files (Theano-MPI's layout), sharded by file.

Directory convention
--------------------
``train_dir`` (and the optional ``val_dir``) hold batch files ``*.hkl``,
``*.hickle``, ``*.h5`` or ``*.hdf5``, taken in natural name order (``2.hkl``
before ``10.hkl``); other files, and the mean and labels files if they sit there,
are ignored. **One file is one batch**: every file
of a directory holds the same number ``B`` of images of one shape, either

* a bare image array; its labels then come from a labels file (``train_labels``,
  ``val_labels``: ``.npy`` or hickle, one integer per image in file order, so
  file ``k`` has ``labels[k*B:(k+1)*B]``, like Theano-MPI's ``train_labels.npy``), or
* a dict ``{'data': images, 'labels': B integers}`` (no labels file then).

The image array is ``(B, C, H, W)`` (``layout='bchw'``) or Theano-MPI's
``(C, H, W, B)`` (``layout='chwb'``, its "c01b"); any integer or float dtype (usually
uint8). ``mean_file`` (``.npy`` or hickle) is the ``(C, H, W)`` mean image (Theano-MPI's
``img_mean.npy``) or a per-channel ``(C,)``/``(C, 1, 1)`` mean, channel-first in both
layouts and in stored pixel units.

Batches are float32 ``(B, C, crop, crop)``: ``(crop(x) - crop(mean)) * scale``.
Training takes a random crop and, with ``flip``, a random horizontal flip per image,
seeded by (seed, epoch, batch slot) so every run and rank count sees the same
augmentation; validation takes the center crop. The *file list* is sharded over
ranks with :class:`~theanompi.models.data.base.DataClass` (common per-epoch
shuffle of the files, padded by wrapping so every rank has ``n_batch_train``
files); validation files are split into contiguous shards.

Files are read by the safe loader (:func:`theanompi.core.safe_load.read_hickle`), which never unpickles anything.

Example
-------
>>> data = HickleBatchData("imagenet/train_hkl", rank=0, size=4, seed=0,
...                        train_labels="imagenet/labels/train_labels.npy",
...                        val_dir="imagenet/val_hkl", val_labels="imagenet/labels/val_labels.npy",
...                        mean_file="imagenet/misc/img_mean.npy", layout="chwb", crop_size=227)  # doctest: +SKIP
>>> xb, yb = data.train_batch(0)                                                              # doctest: +SKIP
>>> xb.shape, data.n_batch_train                                                              # doctest: +SKIP
((128, 3, 227, 227), 2502)
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load import read_array, read_hickle
from theanompi.models.data.base import ArraySpec, DataClass

log = logging.getLogger(__name__)

BATCH_SUFFIXES = (".hkl", ".hickle", ".h5", ".hdf5")
LAYOUTS = ("bchw", "chwb")

# ----- the loader -------------------------------------------------------------------------
def _natural_key(p: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def list_batch_files(directory, what: str, exclude=()) -> list[Path]:
    """The batch files of ``directory`` in natural name order (minus ``exclude``); ConfigError if none.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("10.hkl", "2.hkl", "img_mean.npy"):
    ...     _ = (d / name).write_bytes(b"")
    >>> [p.name for p in list_batch_files(d, "train")]
    ['2.hkl', '10.hkl']
    """
    d = Path(directory)
    if not d.is_dir():
        raise ConfigError(f"{what} directory '{d}' does not exist")
    skip = {Path(p).resolve() for p in exclude if p is not None}
    files = sorted((p for p in d.iterdir() if p.suffix in BATCH_SUFFIXES and p.is_file() and p.resolve() not in skip),
                   key=_natural_key)
    if not files:
        raise ConfigError(f"{what} directory '{d}' holds no batch files ({', '.join(BATCH_SUFFIXES)})")
    return files


def _check_labels(labels, n_classes: int, where: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and labels.dtype.kind not in "iu"):
        raise ConfigError(f"{where}: labels of shape {labels.shape} and dtype {labels.dtype}; "
                          "expected a 1-D integer array")
    bad = np.flatnonzero((labels < 0) | (labels >= n_classes))
    if len(bad):
        raise ConfigError(f"{where}: label {int(labels[bad[0]])} at index {bad[0]} is outside 0..{n_classes - 1}")
    return labels.astype(np.int32)


class _Split:
    """Files of one split, their batch size and image shape, and the labels file's labels (or None)."""

    def __init__(self, owner: HickleBatchData, directory, labels_file, what: str, exclude=()):
        self.owner, self.what = owner, what
        self.files = list_batch_files(directory, what, exclude)
        first, first_labels = owner._read_raw(self.files[0])
        self.batch, self.image_shape = first.shape[0], first.shape[1:]
        if self.batch < 1:
            raise ConfigError(f"{what} file '{self.files[0]}' holds no images")
        self.labels = None
        if labels_file is not None:
            if first_labels is not None:
                raise ConfigError(f"{what} labels are given twice: in '{self.files[0]}' and in '{labels_file}'; "
                                  "drop the labels file or the files' 'labels' entries")
            labels = _check_labels(read_array(labels_file, f"{what} labels file"), owner.n_classes,
                                   f"{what} labels file '{labels_file}'")
            expected = len(self.files) * self.batch
            if len(labels) != expected:
                raise ConfigError(f"{what} labels file '{labels_file}' has {len(labels)} labels; expected "
                                  f"{expected} ({len(self.files)} files x {self.batch} images)")
            self.labels = labels
        elif first_labels is None:
            raise ConfigError(f"{what} file '{self.files[0]}' holds bare images and no labels file was given "
                              f"(pass {what}_labels=... or store dicts with 'data' and 'labels')")

    def batch_at(self, k: int):
        path = self.files[k]
        images, labels = self.owner._read_raw(path)
        if images.shape != (self.batch,) + self.image_shape:
            raise ConfigError(f"{self.what} file '{path}' holds images of shape {images.shape} "
                              f"(as BCHW); expected {(self.batch,) + self.image_shape} like '{self.files[0]}'")
        if self.labels is not None:
            if labels is not None:
                raise ConfigError(f"{self.what} file '{path}' has its own labels but a labels file is used")
            return images, self.labels[k * self.batch:(k + 1) * self.batch]
        if labels is None:
            raise ConfigError(f"{self.what} file '{path}' holds no 'labels' entry")
        labels = _check_labels(labels, self.owner.n_classes, f"{self.what} file '{path}'")
        if len(labels) != self.batch:
            raise ConfigError(f"{self.what} file '{path}' has {len(labels)} labels for {self.batch} images")
        return images, labels


class HickleBatchData(DataClass):
    """Hickle batch files (one file = one rank batch) sharded by file over ranks, cropped and mean-subtracted.

    Parameters
    ----------
    train_dir : path
        Directory of training batch files (see the module docstring for the convention).
    rank, size, seed : int
        This worker, the number of workers, the seed of the file shuffle and the crops.
    val_dir : path, optional
        Directory of validation batch files; none: ``n_batch_val == 0``.
    train_labels, val_labels : path, optional
        Labels files for files holding bare image arrays.
    mean_file : path, optional
        Mean image ``(C, H, W)`` or per-channel mean ``(C,)``/``(C, 1, 1)`` to subtract.
    layout : {'bchw', 'chwb'}
        Axis order of the stored image arrays.
    crop_size : int, optional
        Side of the square crop; ``None``: the whole image.
    flip : bool
        Random horizontal flips for training.
    scale : float
        Factor applied after subtracting the mean (1/255: pixels in [0, 255] -> about [-1, 1]).
    n_classes : int
        Labels must lie in ``0..n_classes-1``.

    Attributes
    ----------
    batch_size : int
        Images per training file (= per rank batch).
    x_train, x_val : ArraySpec
        Shapes ``(files x B, C, crop, crop)`` of what the batches deliver.

    Example
    -------
    >>> d = HickleBatchData("train_hkl", rank=1, size=2, seed=0, train_labels="train_labels.npy",
    ...                     mean_file="img_mean.npy", layout="chwb", crop_size=227)   # doctest: +SKIP
    >>> d.input_shape, d.batch_size                                                   # doctest: +SKIP
    ((3, 227, 227), 256)
    """

    def __init__(self, train_dir, rank: int, size: int, seed: int, *, val_dir=None, train_labels=None,
                 val_labels=None, mean_file=None, layout: str = "bchw", crop_size: int | None = None,
                 flip: bool = True, scale: float = 1.0 / 255.0, n_classes: int = 1000):
        if layout not in LAYOUTS:
            raise ConfigError(f"layout={layout!r} is not allowed; use one of: {', '.join(LAYOUTS)}")
        if not isinstance(n_classes, (int, np.integer)) or isinstance(n_classes, bool) or n_classes < 1:
            raise ConfigError(f"n_classes={n_classes!r} is not allowed; use an integer >= 1")
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not np.isfinite(scale) or scale == 0:
            raise ConfigError(f"scale={scale!r} is not allowed; use a finite non-zero number")
        self.layout, self.n_classes, self.flip, self.scale = layout, int(n_classes), bool(flip), float(scale)
        not_batches = (mean_file, train_labels, val_labels)  # in case they sit among the batch files
        self.train = _Split(self, train_dir, train_labels, "train", not_batches)
        self.val = _Split(self, val_dir, val_labels, "val", not_batches) if val_dir is not None else None
        c, h, w = self.train.image_shape
        if self.val is not None and self.val.image_shape != self.train.image_shape:
            raise ConfigError(f"validation images have shape {self.val.image_shape} but training images "
                              f"{self.train.image_shape} (C, H, W)")
        if crop_size is None:
            self.crop = (h, w)
        elif (isinstance(crop_size, (int, np.integer)) and not isinstance(crop_size, bool)
              and 1 <= crop_size <= min(h, w)):
            self.crop = (int(crop_size), int(crop_size))
        else:
            raise ConfigError(f"crop_size={crop_size!r} is not allowed; use an integer in 1..{min(h, w)} "
                              f"(images are {h}x{w}) or None")
        self.mean = self._load_mean(mean_file, (c, h, w)) if mean_file is not None else None
        self.batch_size = self.train.batch
        n_val_files = len(self.val.files) if self.val is not None else 0
        self.setup_shards(len(self.train.files), n_val_files, 1, rank, size, seed, unit="files_per_batch")
        self.x_train = ArraySpec((len(self.train.files) * self.train.batch, c) + self.crop, np.float32)
        self.x_val = ArraySpec((n_val_files * (self.val.batch if self.val else 0), c) + self.crop, np.float32)
        log.debug("hickle batches: %d train files, %d val files of %s (%s), crop %s", len(self.train.files),
                  n_val_files, self.train.image_shape, layout, self.crop)

    # ----- reading --------------------------------------------------------------------
    def _read_raw(self, path: Path):
        """(images as (B, C, H, W), labels or None) of one file, unchecked against the split."""
        content = read_hickle(path)
        labels = None
        if isinstance(content, dict):
            if "data" not in content:
                raise ConfigError(f"batch file '{path}' holds a dict with keys {sorted(content)}; "
                                  "expected 'data' (and 'labels')")
            images, labels = content["data"], content.get("labels")
        else:
            images = content
        if images.ndim != 4:
            raise ConfigError(f"batch file '{path}' holds an array of shape {images.shape}; expected 4-D "
                              f"images in layout {self.layout!r}")
        if self.layout == "chwb":
            images = images.transpose(3, 0, 1, 2)
        return images, labels

    def _load_mean(self, mean_file, chw) -> np.ndarray:
        mean = np.asarray(read_array(mean_file, "mean file"))
        c, h, w = chw
        if mean.dtype.kind not in "biuf":
            raise ConfigError(f"mean file '{mean_file}' has dtype {mean.dtype}; expected numbers")
        if mean.shape == (c,):
            mean = mean.reshape(c, 1, 1)
        if mean.shape not in ((c, h, w), (c, 1, 1)):
            raise ConfigError(f"mean file '{mean_file}' has shape {mean.shape}; expected {(c, h, w)}, "
                              f"{(c, 1, 1)} or {(c,)} (channel-first)")
        return mean.astype(np.float32)

    # ----- batches --------------------------------------------------------------------
    def _crop(self, images: np.ndarray, rng) -> np.ndarray:
        b, c, h, w = images.shape
        ch, cw = self.crop
        if rng is None:
            oy, ox = np.full(b, (h - ch) // 2), np.full(b, (w - cw) // 2)
            flips = np.zeros(b, bool)
        else:
            oy, ox = rng.integers(0, h - ch + 1, b), rng.integers(0, w - cw + 1, b)
            flips = rng.random(b) < 0.5 if self.flip else np.zeros(b, bool)
        full_mean = self.mean is not None and self.mean.shape[1:] != (1, 1)
        out = np.empty((b, c, ch, cw), np.float32)
        for i in range(b):
            y, x = int(oy[i]), int(ox[i])
            v = images[i, :, y:y + ch, x:x + cw].astype(np.float32)
            if self.mean is not None:
                v -= self.mean[:, y:y + ch, x:x + cw] if full_mean else self.mean
            out[i] = v[:, :, ::-1] if flips[i] else v
        if self.scale != 1.0:
            out *= np.float32(self.scale)
        return out

    def load_train(self, units, count):
        images, labels = self.train.batch_at(int(units[0]))
        rng = np.random.default_rng([self.seed, self.epoch, self.train_slot(count)])
        return self._crop(images, rng), labels

    def load_val(self, units, count):
        images, labels = self.val.batch_at(int(units[0]))
        return self._crop(images, None), labels
