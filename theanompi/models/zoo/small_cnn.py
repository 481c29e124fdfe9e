"""CifarCNN: conv32-pool-conv64-pool-dense10, the CNN of the issue's benchmark.

Network (``widths`` = ``"32,64"``)::

    input (C, H, W) -> conv3x3(32, pad 1) + relu -> maxpool 2
                    -> conv3x3(64, pad 1) + relu -> maxpool 2
                    -> dense(n_classes) -> softmax cross-entropy, momentum SGD

Parameters: 896 + 18,496 + 40,970 = 60,362 on CIFAR-10 (3x32x32); 320 + 18,496 +
2,570 = 21,386 on the digits (1x8x8, for tests).

Model options (cfg ``MODEL_*``; ``tmlauncher --model-options theanompi.models.zoo.small_cnn:CifarCNN`` prints
them all): ``widths`` (two conv widths, ``"32,64"``), the image data options
(:mod:`theanompi.models.data.image_options`: ``data`` = ``cifar10`` (default: needs ``data_dir``), ``synthetic``
(3x32x32), ``digits`` (1x8x8)), ``batch_size`` (128), ``lr`` (0.01), ``momentum``, ``weight_decay``, ``n_epochs``.

cfg to run it on CIFAR-10 (the unpacked ``cifar-10-python.tar.gz``)::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.small_cnn
    MODELCLASS=CifarCNN
    DEVICES=cpu0,cpu1
    N_EPOCHS=10
    MODEL_DATA=cifar10
    MODEL_DATA_DIR=/data/cifar-10-batches-py

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> m = CifarCNN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"data": "digits"}))
>>> [p.name for p in m.params]
['conv1.W', 'conv1.b', 'conv2.W', 'conv2.b', 'fc.W', 'fc.b']
>>> sum(p.get_value().size for p in m.params)
21386
"""

from __future__ import annotations

import theanompi.nn as L
from theanompi.core.options import int_list, model_option, parse_int_list
from theanompi.models.zoo import ImageClassifier


class CifarCNN(ImageClassifier):
    """conv(widths[0])-pool-conv(widths[1])-pool-dense(n_classes), ReLU, He-initialised."""

    declared_options = [model_option("widths", int_list(length=2), "32,64", "channels of the two convolutions")]
    defaults = {"data": "cifar10", "batch_size": 128, "lr": 0.01}
    data_choices = ("cifar10", "synthetic", "digits")

    def build_layers(self, net):
        for i, width in enumerate(parse_int_list(self.hp["widths"]), start=1):
            net = L.Conv2DLayer(net, width, 3, pad=1, W=L.init.HeNormal("relu"), name=f"conv{i}")
            net = L.MaxPool2DLayer(net, 2, name=f"pool{i}")
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, name="fc")
