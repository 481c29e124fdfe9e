"""AlexNet (Krizhevsky et al. 2012, single-tower, as in Theano-MPI's model zoo) on ImageNet-style hickle batches.

Network (``widths`` = ``"96,256,384,384,256"``, ``fc_width`` = 4096, ``stem=imagenet``)::

    crop (3, 227, 227) -> conv11x11/4(96) + relu -> maxpool 3/2
                       -> conv5x5(256, pad 2) + relu -> maxpool 3/2
                       -> conv3x3(384) -> conv3x3(384) -> conv3x3(256) (pad 1, relu) -> maxpool 3/2
                       -> fc(4096) + relu -> dropout -> fc(4096) + relu -> dropout -> fc(n_classes)

``stem=small`` (chosen by ``auto`` for crops under 64 pixels, e.g. 32x32 tests)
replaces the first convolution by 5x5 stride 1 pad 2. The paper's two features
are options, off by default: ``lrn=true`` adds its local response normalisation
(n=5, k=2, alpha=1e-4, beta=0.75) after the first two convolutions, ``groups=2``
its two-GPU split (conv2, conv4 and conv5 see only their half of the channels;
Theano-MPI's ``alex_net.AlexNet`` has both). Dropout (with masks that differ
between ranks) is active in training only: validation uses the deterministic
network.

Data (``data=hickle``, default): ``MODEL_DATA_DIR`` holds ``train/`` (one hickle
file per rank batch: the batch size is the files'), optional ``val/``,
``labels/train_labels.npy`` + ``labels/val_labels.npy`` (when the files hold bare
image arrays), optional ``img_mean.npy`` (see :mod:`theanompi.models.zoo` and
:mod:`theanompi.models.data.hickle_batches`); ``input_size`` is the crop (random
crop + flip for training, center crop for validation), ``layout`` ``bchw`` or
Theano-MPI's ``chwb``. ``data=synthetic`` (``input_size`` x ``input_size``) runs it
without files.

Model options (cfg ``MODEL_*``): ``widths``, ``fc_width``, ``dropout`` (0.5),
``stem`` (``auto``/``imagenet``/``small``), ``lrn`` (false), ``groups`` (1 or 2), ``n_classes`` (1000), ``input_size``
(227), the other data options, ``lr`` (0.01), ``momentum`` (0.9), ``weight_decay``
(0.0005), ``n_epochs`` (70), ``lr_decay_epochs`` (``"20,40,60"``), ``prefetch`` (true).

cfg to run it on Theano-MPI-style ImageNet batches::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.alexnet
    MODELCLASS=AlexNet
    DEVICES=cpu0,cpu1
    MODEL_DATA_DIR=/data/imagenet_hkl     # train/ val/ labels/ img_mean.npy
    MODEL_LAYOUT=chwb

Example
-------
Small: synthetic 3x32x32 images, 5 classes, narrow layers.

>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 5, "widths": "8,8,8,8,8", "fc_width": 16}
>>> m = AlexNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> L.get_output_shape(m.network), m.stem
((None, 5), 'small')
>>> paper = AlexNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={**opts, "lrn": True,
...                                                                                   "groups": 2}))
>>> [p.name for p in paper.params][2:6]
['conv2.g0.W', 'conv2.g0.b', 'conv2.g1.W', 'conv2.g1.b']
"""

from __future__ import annotations

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.core.options import boolean, choice, int_list, model_option, parse_int_list, positive_int, unit_interval
from theanompi.models.zoo import BatchSizedConcat, ImageClassifier


class AlexNet(ImageClassifier):
    """AlexNet-style ConvNet for ImageNet-style crops (see the module docstring)."""

    declared_options = [
        model_option("widths", int_list(length=5), "96,256,384,384,256", "channels of the five convolutions"),
        model_option("fc_width", positive_int, 4096, "units of each of the two hidden dense layers"),
        model_option("dropout", unit_interval, 0.5, "dropout probability after each hidden dense layer (0: none)"),
        model_option("stem", choice("auto", "imagenet", "small"), "auto",
                     "imagenet: conv11x11/4; small: conv5x5/1; auto: small under 64 pixels"),
        model_option("lrn", boolean, False, "the paper's local response normalisation after conv1 and conv2"),
        model_option("groups", choice(1, 2), 1, "2: the paper's two-GPU split of conv2, conv4 and conv5"),
    ]
    defaults = {"data": "hickle", "input_size": 227, "n_classes": 1000, "batch_size": 128, "lr": 0.01,
                "momentum": 0.9, "weight_decay": 0.0005, "n_epochs": 70, "lr_decay_epochs": "20,40,60",
                "prefetch": True}
    data_choices = ("hickle", "synthetic")

    def build_layers(self, net):
        hp = self.hp
        side = min(net.output_shape[2:])
        self.stem = hp["stem"] if hp["stem"] != "auto" else ("imagenet" if side >= 64 else "small")
        w = parse_int_list(hp["widths"])
        he = L.init.HeNormal("relu")
        groups = hp["groups"]
        try:
            if self.stem == "imagenet":
                net = L.Conv2DLayer(net, w[0], 11, stride=4, W=he, name="conv1")
            else:
                net = L.Conv2DLayer(net, w[0], 5, pad=2, W=he, name="conv1")
            net = self.normalised(net, "conv1")
            net = L.MaxPool2DLayer(net, 3, stride=2, name="pool1")
            net = grouped_conv(net, w[1], 5, 2, groups, he, "conv2")
            net = self.normalised(net, "conv2")
            net = L.MaxPool2DLayer(net, 3, stride=2, name="pool2")
            for i in (3, 4, 5):
                net = grouped_conv(net, w[i - 1], 3, 1, 1 if i == 3 else groups, he, f"conv{i}")
            net = L.MaxPool2DLayer(net, 3, stride=2, name="pool5")
        except ValueError as e:
            raise ConfigError(f"AlexNet: a {side}x{side} input is too small for stem={self.stem} ({e}); use a "
                              "larger MODEL_INPUT_SIZE or MODEL_STEM=small") from None
        for i in (6, 7):
            net = L.DenseLayer(net, hp["fc_width"], W=he, name=f"fc{i}")
            if hp["dropout"]:
                net = self.dropout(net, hp["dropout"])
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, W=L.init.Normal(0.01), name="fc8")

    def normalised(self, net, name: str):
        """``net`` followed by the paper's local response normalisation when ``lrn`` is on."""
        if not self.hp["lrn"]:
            return net
        return L.LocalResponseNormalization2DLayer(net, alpha=1e-4, k=2.0, beta=0.75, n=5, name=f"{name}.lrn")


def grouped_conv(net, filters: int, size: int, pad: int, groups: int, W, name: str):
    """A ``size`` x ``size`` convolution (ReLU) whose ``groups`` halves of the filters each see only their share of
    the input channels (AlexNet's two-GPU split); one ordinary convolution when ``groups`` is 1.

    Example
    -------
    >>> L.get_output_shape(grouped_conv(L.InputLayer((None, 4, 6, 6)), 8, 3, 1, 2, L.init.HeNormal(), "c"))
    (None, 8, 6, 6)
    """
    if groups == 1:
        return L.Conv2DLayer(net, filters, size, pad=pad, W=W, name=name)
    channels = net.output_shape[1]
    if channels % groups or filters % groups:
        raise ConfigError(f"{name}: {channels} input channels and {filters} filters do not split into {groups} groups;"
                          " use MODEL_WIDTHS divisible by the groups")
    share = channels // groups
    parts = []
    for g in range(groups):
        piece = L.ExpressionLayer(net, lambda x, g=g: x[:, g * share:(g + 1) * share],
                                  output_shape=lambda s: (s[0], share) + tuple(s[2:]), name=f"{name}.in{g}")
        parts.append(L.Conv2DLayer(piece, filters // groups, size, pad=pad, W=W, name=f"{name}.g{g}"))
    return BatchSizedConcat(parts, axis=1, name=name)
