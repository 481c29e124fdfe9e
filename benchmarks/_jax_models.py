"""The Flax ModelClass of benchmarks/jax_keras_models.py: _ddp_worker.py's CIFAR CNN (conv32-pool-conv64-pool-
dense10) as an nnx.Module on synthetic 32x32x3 images (channels last, as Flax lays them out)."""

import os
import sys

from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cifar_data import CIFAR_CHECKS, CIFAR_DEFAULTS, synthetic_cifar

from theanompi.models.jax_classifier import JaxClassifierModel


class CifarCNN(nnx.Module):
    """conv3x3(32)-relu-pool2-conv3x3(64)-relu-pool2-dense(10): 60 k parameters, as _ddp_worker.cifar_cnn."""

    def __init__(self, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(3, 32, kernel_size=(3, 3), padding="SAME", rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), padding="SAME", rngs=rngs)
        self.dense = nnx.Linear(64 * 8 * 8, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.max_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
        x = nnx.max_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
        return self.dense(x.reshape(x.shape[0], -1))


class FlaxCifarCNN(JaxClassifierModel):
    """The CIFAR CNN in Flax on synthetic data."""

    defaults = {**JaxClassifierModel.defaults, **CIFAR_DEFAULTS}
    checks = CIFAR_CHECKS

    def build_data(self):
        return synthetic_cifar(self)

    def build_network(self) -> nnx.Module:
        return CifarCNN(nnx.Rngs(self.config.seed))
