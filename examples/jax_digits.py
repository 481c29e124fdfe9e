"""A small Flax (nnx) CNN on scikit-learn's digits, trained by theanompi under any rule.

Run it with ``tmlauncher -cfg=examples/jax_digits.cfg`` (BSP) or pick another rule:
``tmlauncher -cfg=examples/jax_digits.cfg --rule=EASGD --devices=cpu0,cpu1,cpu2`` (EASGD's first
device is its server's).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> model = DigitsCNN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
>>> model.data.x_train.shape, sum(p.value.size for p in model.params)
((1500, 8, 8, 1), 17258)
"""

from flax import nnx

from theanompi.models.data.digits import load_digits_split
from theanompi.models.jax_classifier import JaxClassifierModel


class CNN(nnx.Module):
    """conv 3x3 (16) - ReLU - max-pool 2 - dense 64 - ReLU - dense 10, on NHWC images."""

    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(1, 16, kernel_size=(3, 3), padding="SAME", rngs=rngs)
        self.hidden = nnx.Linear(16 * 4 * 4, 64, rngs=rngs)
        self.out = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.max_pool(nnx.relu(self.conv(x)), window_shape=(2, 2), strides=(2, 2))
        return self.out(nnx.relu(self.hidden(x.reshape(x.shape[0], -1))))


class DigitsCNN(JaxClassifierModel):
    """The CNN on the digits (8x8 grey images, channels last)."""

    defaults = {**JaxClassifierModel.defaults, "batch_size": 16, "lr": 0.05, "n_epochs": 4}

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt.reshape(-1, 8, 8, 1), yt, xv.reshape(-1, 8, 8, 1), yv)

    def build_network(self) -> nnx.Module:
        return CNN(nnx.Rngs(self.config.seed))  # the same initial weights on every rank
