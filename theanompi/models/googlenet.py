"""Theano-MPI's GoogLeNet at its path: ``MODELFILE=theanompi.models.googlenet`` (or ``theanompi.models``),
``MODELCLASS=GoogLeNet``.

The zoo's GoogLeNet (:mod:`theanompi.models.zoo.inception`: Szegedy et al.'s network with both auxiliary
classifiers, weighted 0.3 in the training loss) on Theano-MPI's ImageNet batches (``MODEL_DATA_DIR`` in
Theano-MPI's layout, as :mod:`theanompi.models.alex_net` describes; ``MODEL_LAYOUT=chwb``), with
Theano-MPI's recipe: 224x224 crops, 32 images per worker and step, momentum SGD (0.9), weight decay
0.0002, 90 epochs; its polynomial learning-rate decay is replaced by steps (x0.1 after epochs 30, 60
and 80).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 4, "width": 0.0625, "train_size": 4,
...         "val_size": 2, "prefetch": False}
>>> m = GoogLeNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> m.hp["layout"], m.hp["aux_weight"], len(m.outputs)
('chwb', 0.3, 3)
"""

from __future__ import annotations

from theanompi.models.zoo import inception


class GoogLeNet(inception.GoogLeNet):
    """GoogLeNet with its auxiliary classifiers on Theano-MPI's ImageNet batches (see the module docstring)."""

    defaults = {"layout": "chwb", "lr": 0.005}
