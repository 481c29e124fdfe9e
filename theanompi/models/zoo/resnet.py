"""ResNet for CIFAR-10 (He et al., "Deep Residual Learning", 2016, section 4.2).

Network for ``depth`` = 6n + 2 (20, 32, 44, 56, 110, ...), ``width`` w (16)::

    input -> conv3x3(w) + BN + relu
          -> n blocks of w filters   (32x32)
          -> n blocks of 2w filters  (16x16; the first block has stride 2)
          -> n blocks of 4w filters  (8x8;   the first block has stride 2)
          -> global average pool -> dense(n_classes)

    block: conv3x3 + BN + relu -> conv3x3 + BN -> (+ shortcut) -> relu

Shortcuts where the shape changes: option ``A`` (the paper's CIFAR choice, no
parameters): the input subsampled by 2 and zero-padded with the new channels;
option ``B``: a 1x1 convolution with stride 2 and BN. Convolutions have no bias
(BN's beta plays its part). Parameters with w = 16 and option A, BN's gamma and
beta included: ResNet-20 269,722 (the paper's "0.27M"), ResNet-32 464,154 (the
paper's "0.46M"; Multiverso's ResNet-32 benchmark counts 464,154).

Batch norm in data-parallel training follows the layers' policy: the running
statistics are not exchanged; each worker keeps its own, and ``sync_state``
(called by every rule's worker loop at each epoch end) pools them over the
workers before validation, which uses the deterministic (running statistics)
logits. EASGD's validator is the centre on the server rank, which never trains
and so keeps the initial statistics: with EASGD use ``bn_eval=batch``
(validate with each validation batch's own statistics).

Model options (cfg ``MODEL_*``; ``tmlauncher --model-options theanompi.models.zoo.resnet:ResNet`` prints them
all): ``depth`` (32), ``width`` (16), ``shortcut`` (``A``/``B``), ``bn_eval`` (``running``/``batch``), the image
data options (:mod:`theanompi.models.data.image_options`: ``data`` = ``cifar10`` (default), ``synthetic``,
``digits``; ``augment``), ``batch_size`` (128), ``lr`` (0.1), ``momentum`` (0.9), ``weight_decay`` (0.0001),
``n_epochs`` (164), ``lr_decay_epochs`` (``"82,123"``: the paper's schedule, x0.1 at each).

cfg to run ResNet-32 on CIFAR-10 (the paper's recipe: 164 epochs, global batch
128 = 2 workers x 64, crops and flips)::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.resnet
    MODELCLASS=ResNet32
    DEVICES=cpu0,cpu1
    MODEL_DATA=cifar10
    MODEL_DATA_DIR=/data/cifar-10-batches-py
    MODEL_BATCH_SIZE=64
    MODEL_AUGMENT=true

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> cfg = WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"data": "synthetic"})
>>> ResNet32(cfg).n_params
464154
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.core.options import choice, int_of_form, model_option, positive_int
from theanompi.models.zoo import ImageClassifier


class ChannelPadShortcut(L.Layer):
    """Option-A shortcut: ``x[:, :, ::stride, ::stride]`` zero-padded to ``num_filters`` channels
    (the extra channels split evenly before and after, as in Lasagne's CIFAR recipe).

    Example
    -------
    >>> ChannelPadShortcut((None, 16, 32, 32), 32, stride=2).output_shape
    (None, 32, 16, 16)
    """

    def __init__(self, incoming, num_filters: int, stride: int = 2, **kwargs):
        super().__init__(incoming, **kwargs)
        extra = num_filters - self.input_shape[1]
        if extra < 0:
            raise ValueError(f"ChannelPadShortcut: {self.input_shape[1]} input channels > {num_filters}")
        self.num_filters, self.stride = int(num_filters), int(stride)
        self.before = extra // 2
        self.after = extra - self.before

    def get_output_shape_for(self, input_shape):
        def sub(n):
            return None if n is None else (n + self.stride - 1) // self.stride
        return (input_shape[0], self.num_filters, sub(input_shape[2]), sub(input_shape[3]))

    def get_output_for(self, input, **kwargs):
        x = input[:, :, ::self.stride, ::self.stride]
        # zeros shaped by broadcasting, not pt.zeros(x.shape...): that infers the static shape
        # through the whole network above it (measured: 3.2 s of ResNet-20's 3.7 s build)
        one_channel = pt.zeros_like(x[:, :1])

        def zeros(channels):
            return one_channel + np.zeros((1, channels, 1, 1), dtype=x.dtype)

        parts = [zeros(self.before)] if self.before else []
        parts.append(x)
        if self.after:
            parts.append(zeros(self.after))
        return pt.concatenate(parts, axis=1) if len(parts) > 1 else x


def conv_bn(net, filters: int, size: int, stride: int, name: str, relu: bool = True):
    """A ``size`` x ``size`` convolution without bias (He-initialised, "same" padding), batch norm, and a ReLU
    unless ``relu`` is False: the unit every ResNet here is made of.

    Example
    -------
    >>> L.get_output_shape(conv_bn(L.InputLayer((None, 3, 8, 8)), 4, 3, 2, "c"))
    (None, 4, 4, 4)
    """
    conv = L.Conv2DLayer(net, filters, size, stride=stride, pad=size // 2, W=L.init.HeNormal("relu"), b=None,
                         nonlinearity=None, name=name)
    net = L.BatchNormLayer(conv, name=f"{name}.bn")
    return L.NonlinearityLayer(net, L.nonlinearities.rectify, name=f"{name}.relu") if relu else net


class ResNet(ImageClassifier):
    """CIFAR ResNet of depth 6n+2 (see the module docstring)."""

    declared_options = [
        model_option("depth", int_of_form(6, 2), 32, "layers: 6n+2 (20, 32, 44, 56, 110, ...)"),
        model_option("width", positive_int, 16, "channels of the first stage (doubled in each of the two others)"),
        model_option("shortcut", choice("A", "B"), "A",
                     "where the shape changes: A, the input subsampled and zero-padded; B, a 1x1 convolution"),
        model_option("bn_eval", choice("running", "batch"), "running",
                     "batch norm in validation: its running statistics, or each batch's own (EASGD's server)"),
    ]
    defaults = {"data": "cifar10", "batch_size": 128, "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0001,
                "n_epochs": 164, "lr_decay_epochs": "82,123"}
    data_choices: tuple[str, ...] = ("cifar10", "synthetic", "digits")

    def conv_bn(self, net, filters, stride, name, relu=True):
        return conv_bn(net, filters, 3, stride, name, relu)

    def block(self, net, filters, stride, name):
        out = self.conv_bn(net, filters, stride, f"{name}.conv1")
        out = self.conv_bn(out, filters, 1, f"{name}.conv2", relu=False)
        if stride == 1 and net.output_shape[1] == filters:
            shortcut = net
        elif self.hp["shortcut"] == "A":
            shortcut = ChannelPadShortcut(net, filters, stride, name=f"{name}.shortcut")
        else:
            proj = L.Conv2DLayer(net, filters, 1, stride=stride, W=L.init.HeNormal("relu"), b=None,
                                 nonlinearity=None, name=f"{name}.proj")
            shortcut = L.BatchNormLayer(proj, name=f"{name}.proj.bn")
        return L.NonlinearityLayer(L.ElemwiseSumLayer([out, shortcut], name=f"{name}.sum"),
                                   L.nonlinearities.rectify, name=f"{name}.relu")

    def build_layers(self, net):
        n = (self.hp["depth"] - 2) // 6
        w = self.hp["width"]
        net = self.conv_bn(net, w, 1, "conv1")
        for stage, filters in enumerate((w, 2 * w, 4 * w), start=1):
            for k in range(n):
                stride = 2 if stage > 1 and k == 0 else 1
                net = self.block(net, filters, stride, f"stage{stage}.block{k + 1}")
        net = L.GlobalPoolLayer(net, name="pool")
        return L.DenseLayer(net, self.n_outputs, W=L.init.HeNormal(), nonlinearity=None, name="fc")

    def build_network(self, x, rng):
        params, logits, val_logits = super().build_network(x, rng)
        if self.hp["bn_eval"] == "batch":
            val_logits = L.get_output(self.network, deterministic=True, batch_norm_use_averages=False)
        return params, logits, val_logits


class _FixedDepth(ResNet):
    @classmethod
    def check_options(cls, hp):
        super().check_options(hp)
        if hp["depth"] != cls.defaults["depth"]:
            raise ConfigError(f"{cls.__name__} has depth {cls.defaults['depth']}; for MODEL_DEPTH={hp['depth']} "
                              "use MODELCLASS=ResNet")


class ResNet20(_FixedDepth):
    """ResNet-20 (269,722 parameters at width 16, the paper's 0.27M)."""

    defaults = {"depth": 20}


class ResNet32(_FixedDepth):
    """ResNet-32 (464,154 parameters at width 16: Multiverso's benchmark network)."""

    defaults = {"depth": 32}
