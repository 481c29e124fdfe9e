"""Theano-MPI's CIFAR-10 model at its path: ``MODELFILE=theanompi.models.cifar10``, ``MODELCLASS=Cifar10_model``.

The network and the training recipe of Theano-MPI's ``models/cifar10.py``, written here on the model zoo
(:class:`theanompi.models.zoo.ImageClassifier`: our layers and ops, our contract, every rule)::

    28x28 crop of the 32x32 image (random + mirror for training, centre for validation), channel means removed
        -> conv5x5(64) + relu -> maxpool 2 -> conv5x5(128) + relu -> maxpool 2 -> conv3x3(64) + relu
        -> fc(256) + relu -> dropout 0.5 -> fc(10)

Momentum SGD (0.9), learning rate 0.01 divided by 10 after epochs 50, 60 and 65, weight decay 0.0001,
256 images per worker and step, 70 epochs. Data: the CIFAR-10 python batch files
(``cifar-10-python.tar.gz`` unpacked: ``data_batch_1..5``, ``test_batch``) in ``MODEL_DATA_DIR``, from
the cfg or, for Theano-MPI's scripts that pass no options, the environment
(``MODEL_DATA_DIR=/data/cifar-10-batches-py python test_cifar10_cifar10.py``). Validation is the test batch
(Theano-MPI held out a fifth of the training images instead).

Every ``MODEL_*`` option of the zoo's image classifiers applies (:mod:`theanompi.models.data.image_options`):
``widths`` (``"64,128,64"``), ``fc_width`` (256), ``dropout`` (0.5), ``input_size`` (28; 32 for uncropped
images), ``augment`` (``true``: mirrors; crops come with ``input_size`` < 32), ``batch_size``, ``lr``,
``n_epochs``, ... ``data=synthetic`` runs it without files.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 28, "train_size": 8, "val_size": 4, "batch_size": 4}
>>> m = Cifar10_model(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> L.get_output_shape(m.network), m.n_params
((None, 10), 351946)
"""

from __future__ import annotations

import theanompi.nn as L
from theanompi.core.options import int_list, model_option, parse_int_list, positive_int, unit_interval
from theanompi.models.zoo import ImageClassifier


class Cifar10_model(ImageClassifier):  # Theano-MPI's class name
    """Theano-MPI's CIFAR-10 ConvNet (see the module docstring)."""

    declared_options = [
        model_option("widths", int_list(length=3), "64,128,64", "channels of the three convolutions"),
        model_option("fc_width", positive_int, 256, "units of the hidden dense layer"),
        model_option("dropout", unit_interval, 0.5, "dropout probability after the hidden dense layer (0: none)"),
    ]
    defaults = {"data": "cifar10", "input_size": 28, "augment": True, "batch_size": 256, "lr": 0.01,
                "momentum": 0.9, "weight_decay": 0.0001, "n_epochs": 70, "lr_decay_epochs": "50,60,65"}
    data_choices = ("cifar10", "synthetic")

    def build_layers(self, net):
        he = L.init.HeNormal("relu")
        c1, c2, c3 = parse_int_list(self.hp["widths"])
        net = L.MaxPool2DLayer(L.Conv2DLayer(net, c1, 5, W=he, name="conv1"), 2, name="pool1")
        net = L.MaxPool2DLayer(L.Conv2DLayer(net, c2, 5, W=he, name="conv2"), 2, name="pool2")
        net = L.Conv2DLayer(net, c3, 3, W=he, name="conv3")
        net = L.DenseLayer(net, self.hp["fc_width"], W=he, name="fc4")
        if self.hp["dropout"]:
            net = self.dropout(net, self.hp["dropout"])
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, W=L.init.Normal(0.01), name="fc5")
