"""Theano-MPI's AlexNet at its path: ``MODELFILE=theanompi.models.alex_net`` (or ``theanompi.models``),
``MODELCLASS=AlexNet``.

The zoo's AlexNet (:mod:`theanompi.models.zoo.alexnet`) with the paper's features that Theano-MPI's
``alex_net.py`` kept: local response normalisation after the first two convolutions and the two-group
split of conv2, conv4 and conv5. Theano-MPI's recipe: 227x227 crops of 256x256 images, 128 images per
worker and step, momentum SGD (0.9), learning rate 0.01 divided by 10 after epochs 20, 40 and 60,
weight decay 0.0005, 70 epochs.

Data: Theano-MPI's ImageNet batches in ``MODEL_DATA_DIR`` (cfg or environment), read as they are::

    train_hkl_*/              hickle files of uint8 images (C, H, W, B): Theano-MPI's "c01b" (MODEL_LAYOUT=chwb)
    val_hkl_*/                the same for validation (optional)
    labels/train_labels.npy   labels of the files' images in file order (and labels/val_labels.npy)
    misc/img_mean.npy         the mean image (C, H, W)

A file of ``B`` images is ``B / batch_size`` steps when ``MODEL_BATCH_SIZE`` divides it (Theano-MPI's
sub-batches). Theano-MPI's own ``alex_net.py``, changed only by ``theano`` -> ``pytensor``, runs too
(its ``p.container.value.sync()`` line must go: see ``docs/theano-mpi.md``).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 4, "widths": "8,8,8,8,8", "fc_width": 16,
...         "train_size": 4, "val_size": 2, "prefetch": False}
>>> m = AlexNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> m.hp["lrn"], m.hp["groups"], m.hp["layout"], L.get_output_shape(m.network)
(True, 2, 'chwb', (None, 4))
"""

from __future__ import annotations

import theanompi.nn as L  # noqa: F401  (docstring example)
from theanompi.models.zoo import alexnet


class AlexNet(alexnet.AlexNet):
    """AlexNet with LRN and two groups on Theano-MPI's ImageNet batches (see the module docstring)."""

    defaults = {"lrn": True, "groups": 2, "layout": "chwb"}
