"""Theano-MPI's Lasagne ResNet-50 at its path: ``MODELFILE=theanompi.models.lasagne_model_zoo.resnet50``,
``MODELCLASS=ResNet50``.

The zoo's bottleneck ResNet (:mod:`theanompi.models.zoo.resnet_imagenet`) at depth 50 on Theano-MPI's
ImageNet batches (``MODEL_DATA_DIR`` in Theano-MPI's layout, see :mod:`theanompi.models.alex_net`;
``MODEL_LAYOUT=chwb``), with Theano-MPI's recipe: 224x224 crops, 32 images per worker and step (files of
128: four steps each), momentum SGD (0.9), learning rate 0.1 x 32/256 divided by 10 after epochs 30, 60
and 80, weight decay 0.0001, 90 epochs.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 4, "blocks": "1,1,1,1", "width": 4,
...         "train_size": 4, "val_size": 2, "prefetch": False}
>>> m = ResNet50(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> m.blocks, m.hp["layout"], m.hp["lr"]
((1, 1, 1, 1), 'chwb', 0.0125)
"""

from __future__ import annotations

from theanompi.models.zoo import resnet_imagenet


class ResNet50(resnet_imagenet.ResNet50):
    """ResNet-50 on Theano-MPI's ImageNet batches (see the module docstring)."""

    defaults = {"layout": "chwb"}
