"""Theano-MPI's Lasagne VGG-16 at its path: ``MODELFILE=theanompi.models.lasagne_model_zoo.vgg16``,
``MODELCLASS=VGG16``.

The zoo's VGG (:mod:`theanompi.models.zoo.vgg`) at depth 16 on Theano-MPI's ImageNet batches
(``MODEL_DATA_DIR`` in Theano-MPI's layout, see :mod:`theanompi.models.alex_net`; ``MODEL_LAYOUT=chwb``),
with Theano-MPI's recipe: 224x224 crops, 64 images per worker and step (files of 128 images: two steps
each), momentum SGD (0.9), learning rate 0.002 divided by 10 after epochs 15, 30 and 35, weight decay
0.0005, 40 epochs.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 4, "widths": "4,4,8,8,8", "fc_width": 16,
...         "train_size": 4, "val_size": 2, "prefetch": False}
>>> m = VGG16(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> m.hp["depth"], m.hp["layout"], m.hp["batch_size"]
(16, 'chwb', 64)
"""

from __future__ import annotations

from theanompi.models.zoo import vgg


class VGG16(vgg.VGG):
    """VGG-16 on Theano-MPI's ImageNet batches (see the module docstring)."""

    defaults = {"depth": 16, "layout": "chwb", "batch_size": 64, "lr": 0.002, "lr_decay_epochs": "15,30,35",
                "n_epochs": 40}
