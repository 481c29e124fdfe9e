"""The Keras ModelClass of benchmarks/jax_keras_models.py: _ddp_worker.py's CIFAR CNN (conv32-pool-conv64-pool-
dense10) as a keras.Model on synthetic 32x32x3 images, on Keras's backend of the process (KERAS_BACKEND)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cifar_data import CIFAR_CHECKS, CIFAR_DEFAULTS, synthetic_cifar

from theanompi.models.keras_classifier import KerasClassifierModel, keras


def cifar_cnn() -> keras.Model:
    """conv3x3(32)-relu-pool2-conv3x3(64)-relu-pool2-dense(10), channels last."""
    layers = keras.layers
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
        layers.Flatten(), layers.Dense(10),
    ])


class KerasCifarCNN(KerasClassifierModel):
    """The CIFAR CNN in Keras on synthetic data."""

    defaults = {**KerasClassifierModel.defaults, **CIFAR_DEFAULTS}
    checks = CIFAR_CHECKS

    def build_data(self):
        return synthetic_cifar(self)

    def build_network(self) -> keras.Model:
        return cifar_cnn()
