"""Synthetic CIFAR-sized data for the JAX and Keras ModelClasses of benchmarks/jax_keras_models.py: 32x32x3 images
(channels last) of 10 classes, ``train_size`` / ``val_size`` of them (model options)."""

from theanompi.core.options import positive_int
from theanompi.models.data.synthetic import SyntheticData

#: the model options (and their parsers) of the data's size
CIFAR_DEFAULTS = {"train_size": 1280, "val_size": 64}
CIFAR_CHECKS = {"train_size": positive_int, "val_size": positive_int}


def synthetic_cifar(model) -> SyntheticData:
    """This worker's shard of the synthetic images (``model``: a ModelClass with the options above)."""
    c = model.config
    return SyntheticData((32, 32, 3), 10, model.hp["batch_size"], c.rank, c.size, c.seed,
                         n_train=model.hp["train_size"], n_val=model.hp["val_size"])
