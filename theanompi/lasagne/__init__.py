"""Lasagne's public module tree over :mod:`theanompi.models.layers`, so Lasagne code runs on pytensor.

``theanompi.lasagne.layers``, ``.init``, ``.nonlinearities``,
``.objectives``, ``.updates``, ``.regularization``, ``.random`` and
``.utils`` hold the names of Lasagne's modules of the same names; every one
is the object of the layer library (:mod:`theanompi.models.layers`), which
is the one implementation. :func:`theanompi.lasagne_alias.install` makes
``import lasagne`` give this package when the real Lasagne is not installed.
Names of Lasagne that are not ported raise an AttributeError that says so.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi import lasagne
>>> lasagne.random.set_rng(np.random.RandomState(1234))
>>> net = lasagne.layers.InputLayer((None, 1, 8, 8))
>>> net = lasagne.layers.Conv2DLayer(net, 4, 3, pad="same", flip_filters=False)
>>> net = lasagne.layers.DenseLayer(net, 10, nonlinearity=lasagne.nonlinearities.softmax)
>>> y = pt.ivector("y")
>>> loss = lasagne.objectives.categorical_crossentropy(lasagne.layers.get_output(net), y).mean()
>>> params = lasagne.layers.get_all_params(net, trainable=True)
>>> updates = lasagne.updates.nesterov_momentum(loss, params, learning_rate=0.01, momentum=0.9)
>>> [p.name for p in lasagne.layers.get_all_params(net, regularizable=True)]
['W', 'W']
"""

from theanompi.lasagne import (
    init,
    layers,
    nonlinearities,
    objectives,
    random,
    regularization,
    theano_extensions,
    updates,
    utils,
)

__all__ = [
    "init", "layers", "nonlinearities", "objectives", "random", "regularization", "theano_extensions", "updates",
    "utils",
]
