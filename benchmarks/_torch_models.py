"""The ModelClasses of benchmarks/torch_bsp_vs_ddp.py: _ddp_worker.py's CIFAR CNN and ResNet-20 (the very modules
DDP trains) as TorchClassifierModels on synthetic 3x32x32 data."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _ddp_worker import cifar_cnn, resnet

from theanompi.core.options import positive_int
from theanompi.models.data.synthetic import SyntheticData
from theanompi.models.torch_classifier import TorchClassifierModel


class SyntheticCifar(TorchClassifierModel):
    """A network on ``train_size`` synthetic 3x32x32 images of 10 classes (``val_size`` for validation)."""

    defaults = {**TorchClassifierModel.defaults, "train_size": 1280, "val_size": 64}
    checks = {"train_size": positive_int, "val_size": positive_int}

    def build_data(self):
        c = self.config
        return SyntheticData((3, 32, 32), 10, self.hp["batch_size"], c.rank, c.size, c.seed,
                             n_train=self.hp["train_size"], n_val=self.hp["val_size"])


class TorchCifarCNN(SyntheticCifar):
    """conv32-pool-conv64-pool-dense10 (60 k parameters)."""

    def build_network(self) -> torch.nn.Module:
        return cifar_cnn(torch)


class TorchResNet20(SyntheticCifar):
    """CIFAR ResNet-20, option-A shortcuts, batch norm (272 k parameters)."""

    def build_network(self) -> torch.nn.Module:
        return resnet(torch, 20)
