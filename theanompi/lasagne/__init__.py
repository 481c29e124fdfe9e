"""Lasagne's module tree, as a name map onto :mod:`theanompi.nn`: Lasagne code runs on pytensor unchanged.

This file is the one place where a Lasagne name is bound. :data:`MODULES` lists every module of Lasagne's tree
with the module of :mod:`theanompi.nn` that implements it: ``theanompi.lasagne.layers.pool`` holds the public
names of :mod:`theanompi.nn.layers.pool`, the same objects (``lasagne.layers.DenseLayer is
theanompi.nn.layers.DenseLayer``). :data:`LASAGNE_ONLY_NAMES` adds the few names that only Lasagne has (its own
spelling, or a name Lasagne files in another module than nn does); reading a name of :data:`UNPORTED` raises an
AttributeError saying it is not ported; importing a module of :data:`NOT_PROVIDED` raises ImportError, so
``try: from lasagne.layers.dnn import ... except ImportError:`` falls back as with a Lasagne without cuDNN.
:mod:`.theano_extensions` (Lasagne's 1-D convolutions and padding) is code of its own. A bug in a layer is fixed
in :mod:`theanompi.nn`; :mod:`theanompi.lasagne._name_map` builds the modules from the table.
:func:`theanompi.lasagne_alias.install` makes ``import lasagne`` give this package when the real Lasagne is not
installed.

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
>>> from theanompi import nn
>>> lasagne.layers.pool.MaxPool2DLayer is nn.layers.pool.MaxPool2DLayer is nn.MaxPool2DLayer
True
"""

from theanompi import nn
from theanompi.lasagne import theano_extensions  # noqa: F401  (Lasagne's lasagne.theano_extensions)
from theanompi.lasagne._name_map import build_tree

#: Every module of Lasagne's tree (its name under ``lasagne.``) and the module of theanompi.nn that implements it.
MODULES = {
    "init": nn.init,
    "layers": nn.layers,
    "layers.base": nn.layers.base,
    "layers.conv": nn.layers.conv,
    "layers.dense": nn.layers.dense,
    "layers.embedding": nn.layers.embedding,
    "layers.helper": nn.layers.helper,
    "layers.input": nn.layers.input,
    "layers.local": nn.layers.local,
    "layers.merge": nn.layers.merge,
    "layers.noise": nn.layers.noise,
    "layers.normalization": nn.layers.normalization,
    "layers.pool": nn.layers.pool,
    "layers.recurrent": nn.layers.recurrent,
    "layers.shape": nn.layers.shape,
    "layers.special": nn.layers.special,
    "nonlinearities": nn.nonlinearities,
    "objectives": nn.objectives,
    "random": nn.random,
    "regularization": nn.regularization,
    "updates": nn.updates,
    "utils": nn.utils,
}

#: The names only Lasagne has, by module: its own spelling, or a name Lasagne files in another module than nn.
LASAGNE_ONLY_NAMES: dict[str, dict[str, object]] = {
    "layers.special": {  # Lasagne's special.py also holds these
        "NonlinearityLayer": nn.layers.dense.NonlinearityLayer,
        "TPSTransformerLayer": nn.layers.transformer.TPSTransformerLayer,
        "TransformerLayer": nn.layers.transformer.TransformerLayer,
    },
    "nonlinearities": {"ScaledTanh": nn.nonlinearities.ScaledTanH},  # Lasagne's second spelling
    "utils": {
        "as_theano_expression": nn.utils.as_expression,  # the expressions are pytensor's
        "create_param": nn.layers.base.create_param,
    },
}

#: Lasagne's names that are not ported, by module: ``pool_3d`` is Theano's (Lasagne imports it), and
#: ``pool_2d_nxn_regions`` is what ``SpatialPyramidPoolingLayer(implementation='kaiming')`` does.
UNPORTED = {
    "layers.pool": ("pool_2d_nxn_regions", "pool_3d"),
}

#: Lasagne's modules that are not provided, and why: importing one raises ImportError with the reason.
NOT_PROVIDED = {
    "layers.dnn": "(cuDNN layers) is not part of theanompi.lasagne; use the generic layers (lasagne.layers."
                  "Conv2DLayer, Pool2DLayer, batch_norm), which run on theanompi's own ops",
}

_TREE = build_tree(__name__, MODULES, LASAGNE_ONLY_NAMES, UNPORTED, NOT_PROVIDED)

__all__ = sorted({name.partition(".")[0] for name in MODULES} | {"theano_extensions"})
