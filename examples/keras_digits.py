"""A small Keras 3 CNN on scikit-learn's digits, trained by theanompi under any rule, on Keras's torch or jax
backend (``KERAS_BACKEND``; torch when unset).

Run it with ``tmlauncher -cfg=examples/keras_digits.cfg`` (BSP), ``KERAS_BACKEND=jax tmlauncher
-cfg=examples/keras_digits.cfg`` (the same on jax) or pick another rule:
``tmlauncher -cfg=examples/keras_digits.cfg --rule=EASGD --devices=cpu0,cpu1,cpu2`` (EASGD's first
device is its server's).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> model = DigitsCNN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
>>> model.data.x_train.shape, model.keras_model.count_params()
((1500, 8, 8, 1), 17258)
"""

from theanompi.models.data.digits import load_digits_split
from theanompi.models.keras_classifier import KerasClassifierModel, keras  # keras on KERAS_BACKEND


class DigitsCNN(KerasClassifierModel):
    """conv 3x3 (16) - ReLU - max-pool 2 - dense 64 - ReLU - dense 10, on channels-last images."""

    defaults = {**KerasClassifierModel.defaults, "batch_size": 16, "lr": 0.05, "n_epochs": 4}

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt.reshape(-1, 8, 8, 1), yt, xv.reshape(-1, 8, 8, 1), yv)

    def build_network(self) -> keras.Model:
        layers = keras.layers
        return keras.Sequential([
            keras.Input((8, 8, 1)),
            layers.Conv2D(16, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
            layers.Flatten(), layers.Dense(64, activation="relu"), layers.Dense(10),
        ])
