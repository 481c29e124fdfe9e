"""Small learnable image data sets for the model-zoo tests, written in the real on-disk formats.

* :func:`class_images`: uint8 (N, 3, S, S) images whose class is a bright bar in one of
  the image's horizontal bands (tinted by class) on a noisy background: learnable by a
  ConvNet in a few steps (synthetic white-noise class patterns are not, once pooled).
* :func:`write_hickle_dataset`: ``train/``, ``val/``, optionally ``labels/*.npy`` and
  ``img_mean.npy``, in :class:`~theanompi.models.data.hickle_batches.HickleBatchData`'s format
  (one hickle file per rank batch, ``bchw`` or Theano-MPI's ``chwb`` layout).
* :func:`write_cifar10`: ``data_batch_1..5`` and ``test_batch`` as ``cifar-10-python.tar.gz``
  holds them (pickle protocol 2, Python 2 strings, numpy 1.x module names).
* :data:`MODEL_CLASSES` (every ModelClass of the package that declares MODEL_* options) and
  :func:`refused_value` (a value an option's parser refuses).
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path

import numpy as np
from cifar_format import official_bytes


def class_images(n: int, n_classes: int, side: int, seed: int, channels: int = 3):
    """(images uint8 (n, C, side, side), labels int64 (n,)): class k is a bright bar in the k-th
    horizontal band of the image (tinted by class) on a noisy background; flips keep the class."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    x = rng.normal(90, 25, (n, channels, side, side))
    band = max(1, side // n_classes)
    for i, k in enumerate(labels):
        x0 = side // 4 + int(rng.integers(-1, 2))
        rows = slice(int(k) * band, (int(k) + 1) * band)
        x[i, :, rows, x0:x0 + side // 2] += 110
        x[i, int(k) % channels, rows, x0:x0 + side // 2] += 40
    return np.clip(x, 0, 255).astype(np.uint8), labels.astype(np.int64)


def write_hickle_dataset(root: Path, n_train_files: int = 8, n_val_files: int = 2, batch: int = 16,
                         n_classes: int = 4, side: int = 36, layout: str = "bchw", labels_file: bool = False,
                         mean: bool = True, seed: int = 0, theanompi_names: bool = False) -> Path:
    """A Theano-MPI-style hickle data set under ``root``; returns ``root``. ``theanompi_names``: Theano-MPI's own
    directory names (``train_hkl_b<batch>/``, ``val_hkl_b<batch>/``, ``misc/img_mean.npy``)."""
    import hickle

    root = Path(root)
    for split, n_files, s in (("train", n_train_files, seed), ("val", n_val_files, seed + 1)):
        if not n_files:
            continue
        d = root / (f"{split}_hkl_b{batch}" if theanompi_names else split)
        d.mkdir(parents=True, exist_ok=True)
        x, y = class_images(n_files * batch, n_classes, side, s)
        for k in range(n_files):
            imgs, labs = x[k * batch:(k + 1) * batch], y[k * batch:(k + 1) * batch]
            arr = imgs if layout == "bchw" else np.ascontiguousarray(imgs.transpose(1, 2, 3, 0))
            hickle.dump(arr if labels_file else {"data": arr, "labels": labs}, str(d / f"{k}.hkl"))
        if labels_file:
            (root / "labels").mkdir(exist_ok=True)
            np.save(root / "labels" / f"{split}_labels.npy", y)
        if split == "train" and mean:
            mean_file = root / "misc" / "img_mean.npy" if theanompi_names else root / "img_mean.npy"
            mean_file.parent.mkdir(exist_ok=True)
            np.save(mean_file, x.mean(axis=0).astype(np.float32))
    return root


def write_theanompi_imagenet(root: Path, n_train_files: int = 4, n_val_files: int = 2, batch: int = 16,
                             n_classes: int = 4, side: int = 36) -> Path:
    """ImageNet batches as Theano-MPI stored them: bare uint8 ``(C, H, W, B)`` arrays in ``train_hkl_b<B>/`` and
    ``val_hkl_b<B>/``, ``labels/{train,val}_labels.npy``, ``misc/img_mean.npy``; returns ``root``."""
    return write_hickle_dataset(root, n_train_files, n_val_files, batch, n_classes, side, layout="chwb",
                                labels_file=True, theanompi_names=True)


def write_mnist(root: Path, n_train: int = 128, n_val: int = 32, seed: int = 0) -> Path:
    """``mnist.npz`` with learnable 28x28 class images (floats in [0, 1]); returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (xt, yt), (xv, yv) = (class_images(n, 10, 28, seed + k, channels=1) for k, n in enumerate((n_train, n_val)))
    np.savez(root / "mnist.npz", x_train=(xt.reshape(n_train, 784) / 255).astype(np.float32), y_train=yt,
             x_val=(xv.reshape(n_val, 784) / 255).astype(np.float32), y_val=yv)
    return root




def write_cifar10(root: Path, n_per_file: int = 64, n_test: int = 64, seed: int = 0) -> Path:
    """The six CIFAR-10 python batch files with learnable 3x32x32 images of 10 classes; returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for k, name in enumerate(names):
        n = n_test if name == "test_batch" else n_per_file
        x, y = class_images(n, 10, 32, seed + k)
        batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in y], b"data": x.reshape(n, 3072),
                 b"filenames": [f"img_{i}.png".encode() for i in range(n)]}
        (root / name).write_bytes(official_bytes(batch))
    return root


# ----- in-process training (no MPI) -----------------------------------------------------------
class StepRecorder:
    """A recorder that keeps every reported (loss, error, n)."""

    def __init__(self):
        self.train, self.val = [], []

    def record_train(self, loss, error, n):
        self.train.append((float(loss), float(error), int(n)))

    def record_val(self, loss, error, n):
        self.val.append((float(loss), float(error), int(n)))

    @contextlib.contextmanager
    def timer(self, kind):
        yield


def make_model(cls, seed: int = 0, rank: int = 0, size: int = 1, sync_type: str | None = "local", **options):
    """``cls(WorkerConfig(...))`` with ``options`` as its model options, compiled for ``sync_type``."""
    from theanompi.models.contract import WorkerConfig, check_model_instance

    model = cls(WorkerConfig(rank=rank, size=size, seed=seed, device=f"cpu{rank}", sync_type=sync_type,
                             model_options=options))
    check_model_instance(model, sync_type)
    model.compile_iter_fns(sync_type)
    return model


def train_epochs(model, epochs: int, start: int = 0, max_steps: int | None = None) -> list[float]:
    """Train ``epochs`` epochs (``cdd`` models: train_iter + apply_update); the per-step training losses."""
    rec = StepRecorder()
    steps = 0
    for epoch in range(start, start + epochs):
        model.adjust_hyperp(epoch)
        for count in range(model.data.n_batch_train):
            vector = model.train_iter(count, rec)
            if vector is not None:
                model.apply_update(vector)
            steps += 1
            if max_steps is not None and steps >= max_steps:
                return [loss for loss, _, _ in rec.train]
    return [loss for loss, _, _ in rec.train]


def validate(model) -> tuple[float, float]:
    """(mean validation loss, mean validation error) over the model's validation batches."""
    rec = StepRecorder()
    for count in range(model.data.n_batch_val):
        model.val_iter(count, rec)
    n = sum(k for _, _, k in rec.val)
    return sum(loss * k for loss, _, k in rec.val) / n, sum(e * k for _, e, k in rec.val) / n


#: every ModelClass of the package that declares MODEL_* options: the zoo, the base classes, Theano-MPI's paths
MODEL_CLASSES = [
    *(f"{module}:{name}" for name, module in importlib.import_module("theanompi.models.zoo").MODELS.items()),
    "theanompi.models.base:ClassifierModel", "theanompi.models.mlp:MLP",
    "theanompi.models.hyperparams:ImageClassifierHyperParams", "theanompi.models.cifar10:Cifar10_model",
    "theanompi.models.alex_net:AlexNet", "theanompi.models.googlenet:GoogLeNet",
    "theanompi.models.lasagne_model_zoo.vgg16:VGG16", "theanompi.models.lasagne_model_zoo.resnet50:ResNet50",
    "theanompi.models.lasagne_model_zoo.wgan:WGAN", "theanompi.models.lasagne_model_zoo.lsgan:LSGAN",
    "theanompi.models.lasagne_model_zoo.lsgan_cifar10:LSGAN",
]


def model_class(reference: str) -> type:
    """The class ``MODELFILE:MODELCLASS`` names (a module's)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


#: values one of which each option's parser refuses
CANDIDATE_BAD_VALUES = ("no such value", -1, 10**9, 12345, 0, True)


def refused_value(parse):
    """A value ``parse`` refuses; for the ``data`` option, a data set the model does not take where there is one (a
    name that is no data set at all is told every data set theanompi has)."""
    from theanompi.core.options import InvalidValue
    from theanompi.models.data.image_options import DATA_KINDS

    others = [kind for kind in DATA_KINDS if kind not in getattr(parse, "choices", DATA_KINDS)]
    for value in (*others, *CANDIDATE_BAD_VALUES):
        try:
            parse(value)
        except InvalidValue:
            return value
    raise AssertionError(f"{parse!r} refuses none of {CANDIDATE_BAD_VALUES}")
