"""A small PyTorch CNN on scikit-learn's digits, trained by theanompi under any rule.

Run it with ``tmlauncher -cfg=examples/torch_digits.cfg`` (BSP) or pick another rule:
``tmlauncher -cfg=examples/torch_digits.cfg --rule=EASGD --devices=cpu0,cpu1,cpu2`` (EASGD's first
device is its server's).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> model = DigitsCNN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
>>> model.data.x_train.shape, sum(p.numel() for p in model.params)
((1500, 1, 8, 8), 17258)
"""

import torch
from torch import nn

from theanompi.models.data.digits import load_digits_split
from theanompi.models.torch_classifier import TorchClassifierModel


class DigitsCNN(TorchClassifierModel):
    """conv 3x3 (16) - ReLU - max-pool 2 - dense 64 - ReLU - dense 10."""

    defaults = {**TorchClassifierModel.defaults, "batch_size": 16, "lr": 0.05, "n_epochs": 4}

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split(flat=False)
        return self.shard(xt, yt, xv, yv)

    def build_network(self) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10),
        )


__all__ = ["DigitsCNN", "torch"]
