"""The ModelClasses of benchmarks/torch_bsp_vs_ddp.py: _ddp_worker.py's CIFAR CNN and ResNet-20 (the very modules
DDP trains) as TorchClassifierModels on synthetic 3x32x32 data; and benchmarks/learning_at_scale.py's PyTorch model,
a 1-D CNN on signal_cnn.py's noisy sinusoids (TorchSignalCNN)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _ddp_worker import cifar_cnn, resnet

from theanompi.core.options import model_option, positive_float, positive_int
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


class TorchSignalCNN(TorchClassifierModel):
    """The PyTorch counterpart of benchmarks/signal_cnn.py's SignalCNN on the same noisy sinusoids: three
    conv1d(``kernel``)+ReLU+maxpool(2) stages (16, 32, 32 channels), global average pooling, a linear layer;
    momentum SGD (lr 0.02, momentum 0.9, batch 32) without a schedule of its own (the session's LR_SCHEDULE applies).
    """

    declared_options = [
        model_option("n_train", positive_int, 8000, "training signals"),
        model_option("n_val", positive_int, 4000, "validation signals"),
        model_option("noise", positive_float, 2.0, "standard deviation of the white noise added to each sinusoid"),
        model_option("kernel", positive_int, 15, "width of each convolution (odd)"),
    ]
    defaults = {"lr": 0.02, "n_epochs": 30}

    def build_data(self):
        from signal_cnn import make_signals

        noise = float(self.hp["noise"])
        (xt, yt), (xv, yv) = make_signals(self.hp["n_train"], self.hp["n_val"], noise)
        scale = 1.0 / (0.5 + noise ** 2) ** 0.5  # unit variance, as SignalCNN's
        return self.shard((xt * scale).reshape(len(xt), 1, -1), yt, (xv * scale).reshape(len(xv), 1, -1), yv)

    def build_network(self) -> torch.nn.Module:
        k, layers, width = int(self.hp["kernel"]), [], 1
        for out in (16, 32, 32):
            layers += [torch.nn.Conv1d(width, out, k, padding=k // 2), torch.nn.ReLU(), torch.nn.MaxPool1d(2)]
            width = out
        head = [torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(width, 8)]
        return torch.nn.Sequential(*layers, *head)
