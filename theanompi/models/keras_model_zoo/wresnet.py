"""Theano-MPI's Keras Wide ResNet at its path: ``MODELFILE=theanompi.models.keras_model_zoo.wresnet``,
``MODELCLASS=Wide_ResNet``.

Keras 1 on Theano is gone; this is a Keras 3 model on Keras's **torch backend**, trained through theanompi's
PyTorch adapter (:class:`theanompi.models.torch_classifier.TorchClassifierModel`: a Keras 3 model on torch
is a ``torch.nn.Module``), so it runs under every rule and sync type (Theano-MPI's ran only under BSP
``avg``). ``KERAS_BACKEND`` is set to ``torch`` unless the process already chose it; another backend is
refused in one line.

Network: WRN-d-k of Zagoruyko & Komodakis ("Wide Residual Networks", 2016), channels first,
``depth`` d = 6n + 4 (28: n = 4, Theano-MPI's), ``widen`` k (4, Theano-MPI's)::

    input (3, 32, 32) -> conv3x3(16)
        -> n blocks of 16k, n blocks of 32k (the first with stride 2), n blocks of 64k (the first with stride 2)
        -> BN + relu -> global average pool -> dense(n_classes)

    block (pre-activation): BN + relu -> conv3x3 (stride) -> BN + relu -> dropout 0.3 -> conv3x3 -> (+ shortcut)
    shortcut: the input, or a 1x1 convolution (stride) of the pre-activated input where the width changes

Training: the paper's momentum SGD (0.9) with weight decay 0.0005 (Theano-MPI's used Adam), learning
rate 0.1 divided by 5 after epochs 50 and 70 (Theano-MPI's steps), 128 images per worker and step, crops
of the zero-padded image and mirrors, 90 epochs. Batch norm's moving statistics are averaged over the
workers before each validation (``sync_state``). Data: the CIFAR-10 python batches in ``MODEL_DATA_DIR``
(cfg or environment), or ``data=synthetic``; every option of :mod:`theanompi.models.data.image_options` applies.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "depth": 10, "widen": 1, "train_size": 8, "val_size": 4, "batch_size": 4}
>>> m = Wide_ResNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> sum(p.numel() for p in m.params), len(m.running_stats())       # WRN-10-1; BN's moving means and variances
(77850, 14)
"""

from __future__ import annotations

import os

import torch

from theanompi.core.errors import ConfigError
from theanompi.core.options import int_of_form, model_option, positive_int, unit_interval
from theanompi.models.hyperparams import ImageClassifierHyperParams
from theanompi.models.keras_torch import KerasTraining, non_trainable
from theanompi.models.torch_classifier import TorchClassifierModel


def keras_on_torch():
    """The ``keras`` module on its torch backend (``KERAS_BACKEND=torch`` unless already chosen); ConfigError if
    this process runs Keras on another backend."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras  # noqa: PLC0415 - keras picks its backend at import: KERAS_BACKEND is set first

    if keras.backend.backend() != "torch":
        raise ConfigError(f"Wide_ResNet runs Keras on its torch backend, but this process uses "
                          f"{keras.backend.backend()!r} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r}); "
                          "set KERAS_BACKEND=torch")
    return keras


def wide_resnet(keras, depth: int, widen: int, dropout: float, n_classes: int, input_shape: tuple[int, ...],
                weight_decay: float = 0.0):
    """The Keras model of WRN-``depth``-``widen`` (channels first; logits, no softmax)."""
    layers = keras.layers
    fmt = "channels_first"

    def conv(x, filters, size, stride=1):
        return layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False, data_format=fmt,
                             kernel_initializer="he_normal")(x)

    def bn_relu(x):
        return layers.Activation("relu")(layers.BatchNormalization(axis=1, momentum=0.9, epsilon=1e-5)(x))

    def block(x, filters, stride):
        pre = bn_relu(x)
        shortcut = x if stride == 1 and x.shape[1] == filters else conv(pre, filters, 1, stride)
        y = conv(pre, filters, 3, stride)
        y = bn_relu(y)
        if dropout:
            y = layers.Dropout(dropout)(y)
        y = conv(y, filters, 3)
        return layers.Add()([shortcut, y])

    n = (depth - 4) // 6
    inputs = keras.Input(input_shape)
    x = conv(inputs, 16, 3)
    for group, width in enumerate((16 * widen, 32 * widen, 64 * widen)):
        for k in range(n):
            x = block(x, width, 2 if group > 0 and k == 0 else 1)
    x = layers.GlobalAveragePooling2D(data_format=fmt)(bn_relu(x))
    return keras.Model(inputs, layers.Dense(n_classes)(x), name=f"wrn_{depth}_{widen}")


class Wide_ResNet(ImageClassifierHyperParams, TorchClassifierModel):  # Theano-MPI's class name
    """WRN-d-k in Keras 3 on torch, trained by theanompi's PyTorch adapter (see the module docstring)."""

    declared_options = [
        model_option("depth", int_of_form(6, 4), 28, "layers: 6n+4 (10, 16, 22, 28, ...)"),
        model_option("widen", positive_int, 4, "the widening factor k: channels 16k, 32k, 64k"),
        model_option("dropout", unit_interval, 0.3, "dropout probability inside each block (0: none)"),
    ]
    defaults = {"data": "cifar10", "augment": True, "batch_size": 128, "lr": 0.1, "momentum": 0.9,
                "weight_decay": 0.0005, "n_epochs": 90, "lr_decay_epochs": "50,70", "lr_decay": 0.2}
    data_choices = ("cifar10", "synthetic")

    def build_network(self) -> torch.nn.Module:
        keras = keras_on_torch()
        keras.utils.set_random_seed(self.config.seed)  # the same initial weights on every rank
        hp = self.hp
        model = wide_resnet(keras, hp["depth"], hp["widen"], hp["dropout"], self.n_outputs,
                            tuple(self.data.x_train.shape[1:]))
        self.keras_model = model
        return KerasTraining(model)

    def running_stats(self) -> list[torch.Tensor]:
        """Batch norm's moving statistics: Keras keeps them as non-trainable float parameters."""
        return [p for p in non_trainable(self.network) if p.is_floating_point()]

