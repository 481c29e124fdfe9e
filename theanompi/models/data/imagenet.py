"""Theano-MPI's ImageNet DataClass on :class:`~theanompi.models.data.hickle_batches.HickleBatchData`.

``MODEL_DATA_DIR`` has Theano-MPI's layout (or the model zoo's ``train/``, ``val/``)::

    train_hkl_*/              one hickle file per batch: bare uint8 arrays (C, H, W, B), "c01b"
    val_hkl_*/                optional, the same for validation
    labels/train_labels.npy   one integer per image, in the files' natural name order
    labels/val_labels.npy     (needed with val_hkl_*/)
    misc/img_mean.npy         mean image (C, H, W) (or img_mean.npy beside the folders)

The files are checked (shapes, labels, no pickled content) by HickleBatchData's
reader, which never unpickles. Theano-MPI's models load the files themselves
(``hkl.load(data.train_img_shard[i])``), so ``train_img_shard`` holds file *names*.

Example
-------
>>> import hickle, os, tempfile
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.current_config import set_current
>>> root = tempfile.mkdtemp()
>>> for sub in ("train_hkl_b4", "labels", "misc"):
...     os.makedirs(os.path.join(root, sub))
>>> for k in range(3):
...     hickle.dump(np.zeros((3, 8, 8, 4), np.uint8), os.path.join(root, "train_hkl_b4", f"{k:04d}.hkl"))
>>> np.save(os.path.join(root, "labels", "train_labels.npy"), np.arange(12) % 5)
>>> np.save(os.path.join(root, "misc", "img_mean.npy"), np.full((3, 8, 8), 100.0, np.float32))
>>> set_current(WorkerConfig(rank=1, size=2, seed=0, device="cpu", model_options={"data_dir": root}))
>>> data = ImageNet_data(verbose=False)
>>> data.batch_data(4); data.extend_data(1, 2)
>>> data.shuffle_data("train", common_seed=0); data.shard_data("train", 1, 2)
>>> data.n_batch_train, data.n_batch_val, os.path.basename(data.train_img_shard[0])[-4:]
(2, 0, '.hkl')
>>> data.rawdata[4].shape, data.rawdata[5].shape
((3, 8, 8, 1), (3, 1, 1, 1))
>>> set_current(None)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.models.data.hickle_batches import HickleBatchData
from theanompi.models.data.theanompi_api import FileBatchAPI, session_data_dir

#: Per-channel standard deviation of ImageNet's RGB pixels in [0, 1] (what Theano-MPI divided by).
IMAGENET_STD = (0.229, 0.224, 0.225)
MEAN_FILES = ("misc/img_mean.npy", "img_mean.npy")
N_CLASSES = 1000


def find_split_dir(root: Path, split: str, required: bool) -> Path | None:
    """``root/<split>_hkl*`` (exactly one) or ``root/<split>``; ConfigError if required and absent.

    Example
    -------
    >>> import tempfile
    >>> find_split_dir(Path(tempfile.mkdtemp()), "val", required=False) is None
    True
    """
    found = sorted(p for p in root.glob(f"{split}_hkl*") if p.is_dir())
    if len(found) > 1:
        raise ConfigError(f"MODEL_DATA_DIR '{root}' has several {split} folders ({', '.join(p.name for p in found)}); "
                          "keep one")
    if found:
        return found[0]
    if (root / split).is_dir():
        return root / split
    if required:
        raise ConfigError(f"MODEL_DATA_DIR '{root}' has no {split}_hkl*/ folder of hickle batch files "
                          f"(Theano-MPI's layout: {split}_hkl_*/, labels/{split}_labels.npy, misc/img_mean.npy)")
    return None


def _required_file(root: Path, names, what: str) -> Path:
    for name in names:
        if (root / name).is_file():
            return root / name
    raise ConfigError(f"{what} '{root / names[0]}' is missing (Theano-MPI's layout: train_hkl_*/, val_hkl_*/, "
                      "labels/train_labels.npy, labels/val_labels.npy, misc/img_mean.npy)")


class ImageNet_data(FileBatchAPI, HickleBatchData):  # Theano-MPI's name
    """Theano-MPI's ImageNet DataClass: hickle batch files of ``MODEL_DATA_DIR``, sharded by file.

    Parameters
    ----------
    verbose : bool
        Log the batching and sharding at INFO level (else DEBUG).

    Attributes
    ----------
    channels, width, height : int
        Of the stored images (Theano-MPI: 3, 256, 256).
    n_class : int
        1000; labels must lie in 0..999.
    rawdata : list
        ``[train file names, train labels int32, val file names, val labels, img_mean (C, H, W, 1)
        float32, img_std (C, 1, 1, 1) float32]``; ``img_std`` is ImageNet's (0.229, 0.224, 0.225)
        for 3 channels, else ones.
    batch_size : int
        Images per file; ``batch_data(file_batch_size)`` must be given the same number.

    Other methods (``train_batch``/``val_batch``: mean-subtracted float32 BCHW batches) are
    :class:`~theanompi.models.data.hickle_batches.HickleBatchData`'s.
    """

    n_class = N_CLASSES

    def __init__(self, verbose: bool = False):
        self.init_session("ImageNet_data", verbose)
        root = session_data_dir("ImageNet_data")
        train_dir = find_split_dir(root, "train", required=True)
        val_dir = find_split_dir(root, "val", required=False)
        train_labels = _required_file(root, ("labels/train_labels.npy",), "training labels file")
        val_labels = _required_file(root, ("labels/val_labels.npy",), "validation labels file") if val_dir else None
        mean_file = _required_file(root, MEAN_FILES, "mean image file")
        HickleBatchData.__init__(self, train_dir, self.session_rank, self.session_size, self.session_seed,
                                 val_dir=val_dir, train_labels=train_labels, val_labels=val_labels,
                                 mean_file=mean_file, layout="chwb", crop_size=None, flip=False, scale=1.0,
                                 n_classes=N_CLASSES)
        self.channels, self.height, self.width = (int(s) for s in self.train.image_shape)
        std = IMAGENET_STD if self.channels == 3 else (1.0,) * self.channels
        assert self.mean is not None  # mean_file is required above
        mean = np.broadcast_to(self.mean, self.train.image_shape).astype(np.float32)
        val_files = [str(p) for p in self.val.files] if self.val else []
        val_labels_all = self.val.labels if self.val else np.zeros(0, np.int32)
        self.rawdata = [[str(p) for p in self.train.files], self.train.labels, val_files, val_labels_all,
                        mean[..., np.newaxis], np.asarray(std, np.float32).reshape(-1, 1, 1, 1)]

    def make_file_batches(self, file_batch_size):
        if file_batch_size != self.batch_size:
            raise ConfigError(f"ImageNet_data: file_batch_size={file_batch_size} but the files in "
                              f"'{self.train.files[0].parent}' hold {self.batch_size} images each")
        if self.val is not None and self.val.batch != self.batch_size:
            raise ConfigError(f"ImageNet_data: the files in '{self.val.files[0].parent}' hold {self.val.batch} "
                              f"images each but those in '{self.train.files[0].parent}' {self.batch_size}")
        train_img, train_labels, val_img, val_labels = self.rawdata[:4]
        b = file_batch_size
        return (list(train_img), [train_labels[k * b:(k + 1) * b] for k in range(len(train_img))],
                list(val_img), [val_labels[k * b:(k + 1) * b] for k in range(len(val_img))])
