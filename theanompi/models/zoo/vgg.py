"""VGG (Simonyan & Zisserman 2015; configurations A, B, D, E = VGG-11/13/16/19) on ImageNet-style hickle batches.

Network (``depth`` 16, ``widths`` = ``"64,128,256,512,512"``, ``fc_width`` = 4096)::

    crop (3, 224, 224) -> 5 stages of k conv3x3(pad 1) + relu [+ BN], each followed by maxpool 2
                          (k per stage: 11: 1,1,2,2,2   13: 2,2,2,2,2   16: 2,2,3,3,3   19: 2,2,4,4,4)
                       -> fc(4096) + relu -> dropout -> fc(4096) + relu -> dropout -> fc(n_classes)

The input side must be at least 32 (five poolings). ``batch_norm=true`` gives
the "VGG-BN" variant (conv + BN + relu; batch-norm statistics pooled over the
workers by ``sync_state`` before each validation). Dropout (masks differ between
ranks) is active in training only; validation uses the deterministic network.

Data: as :mod:`theanompi.models.zoo.alexnet` (``data=hickle`` with ``MODEL_DATA_DIR``
= ``train/``, ``val/``, ``labels/``, ``img_mean.npy``; ``input_size`` is the crop;
or ``data=synthetic``).

Model options (cfg ``MODEL_*``): ``depth`` (11/13/16/19), ``widths``, ``fc_width``,
``dropout`` (0.5), ``batch_norm`` (false), ``n_classes`` (1000), ``input_size``
(224), the other data options, ``lr`` (0.01), ``momentum`` (0.9),
``weight_decay`` (0.0005), ``n_epochs`` (74), ``lr_decay_epochs`` (``"30,60"``),
``prefetch`` (true).

cfg to run VGG-16 on Theano-MPI-style ImageNet batches::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.vgg
    MODELCLASS=VGG
    DEVICES=cpu0,cpu1
    MODEL_DATA_DIR=/data/imagenet_hkl
    MODEL_DEPTH=16

Example
-------
Small: VGG-11 on synthetic 3x32x32 images, narrow layers.

>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 4, "widths": "4,8,8,16,16", "fc_width": 16,
...         "depth": 11}
>>> m = VGG(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> sum(1 for l in L.get_all_layers(m.network) if isinstance(l, L.Conv2DLayer)), L.get_output_shape(m.network)
(8, (None, 4))
"""

from __future__ import annotations

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.core.options import boolean, choice, int_list, model_option, parse_int_list, positive_int, unit_interval
from theanompi.models.zoo import ImageClassifier

#: Convolutions per stage of each depth.
CONFIGS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}


class VGG(ImageClassifier):
    """VGG-11/13/16/19 (see the module docstring)."""

    declared_options = [
        model_option("depth", choice(*CONFIGS), 16, "weight layers: 11, 13, 16 or 19 (the paper's A, B, D, E)"),
        model_option("widths", int_list(length=5), "64,128,256,512,512", "channels of the five stages"),
        model_option("fc_width", positive_int, 4096, "units of each of the two hidden dense layers"),
        model_option("dropout", unit_interval, 0.5, "dropout probability after each hidden dense layer (0: none)"),
        model_option("batch_norm", boolean, False, "batch norm after every convolution (VGG-BN)"),
    ]
    defaults = {"data": "hickle", "input_size": 224, "n_classes": 1000, "batch_size": 64, "lr": 0.01,
                "momentum": 0.9, "weight_decay": 0.0005, "n_epochs": 74, "lr_decay_epochs": "30,60",
                "prefetch": True}
    data_choices = ("hickle", "synthetic")

    def build_layers(self, net):
        hp = self.hp
        side = min(net.output_shape[2:])
        if side < 32:
            raise ConfigError(f"VGG: a {side}x{side} input is too small for five 2x2 poolings; use "
                              "MODEL_INPUT_SIZE >= 32")
        he = L.init.HeNormal("relu")
        for stage, (n_convs, width) in enumerate(zip(CONFIGS[hp["depth"]], parse_int_list(hp["widths"])), start=1):
            for k in range(1, n_convs + 1):
                name = f"conv{stage}_{k}"
                if hp["batch_norm"]:
                    conv = L.Conv2DLayer(net, width, 3, pad=1, W=he, b=None, nonlinearity=None, name=name)
                    net = L.NonlinearityLayer(L.BatchNormLayer(conv, name=f"{name}.bn"), name=f"{name}.relu")
                else:
                    net = L.Conv2DLayer(net, width, 3, pad=1, W=he, name=name)
            net = L.MaxPool2DLayer(net, 2, name=f"pool{stage}")
        for i in (6, 7):
            net = L.DenseLayer(net, hp["fc_width"], W=he, name=f"fc{i}")
            if hp["dropout"]:
                net = self.dropout(net, hp["dropout"])
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, W=L.init.Normal(0.01), name="fc8")
