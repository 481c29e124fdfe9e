"""theanompi.nn: the neural-network library of theanompi, Lasagne's design on pytensor.

Lasagne cannot be installed next to pytensor (it imports theano), so theanompi carries a library with Lasagne's
idioms, laid out as Lasagne lays out its own tree:

=========================  ===========================================================================================
module                     what it holds (Lasagne's module of the same name)
=========================  ===========================================================================================
:mod:`.layers`             the layers, one module per family (``dense``, ``conv``, ``pool``, ``normalization``,
                           ``recurrent``, ...), and the functions that walk a network (``get_output``, ...)
:mod:`.init`               parameter initializers (``GlorotUniform``, ``HeNormal``, ``Constant``, ...)
:mod:`.nonlinearities`     activation functions (``rectify``, ``softmax``, ``LeakyRectify``, ...)
:mod:`.objectives`         losses and metrics (``categorical_crossentropy``, ``categorical_accuracy``, ...)
:mod:`.regularization`     weight penalties (``l2``, ``regularize_network_params``, ...)
:mod:`.updates`            update rules, the optimizers (``sgd``, ``nesterov_momentum``, ``adam``, ...)
:mod:`.random`             the one generator initializers and random layers draw from (``set_rng``)
:mod:`.utils`              helpers the others share (``floatX``, ``as_tuple``, ``unroll_scan``, ...)
=========================  ===========================================================================================

Every name of :mod:`.layers` is also a name of this package (``nn.DenseLayer is nn.layers.DenseLayer``). The
library knows nothing of MPI, sessions or Lasagne's names: it imports only :mod:`theanompi.backend` (its
convolution, pooling and batch-norm ops) and :mod:`theanompi.core`. :mod:`theanompi.lasagne` maps Lasagne's
module tree onto it, so ``import lasagne`` code runs unchanged; the zoo (:mod:`theanompi.models.zoo`) is built
with it.

Differences from Lasagne: ``Conv2DLayer(flip_filters=False)`` and ``TransposedConv2DLayer(flip_filters=True)`` by
default (no filter flip in the graph; the other value for weights trained with Lasagne's defaults);
``categorical_crossentropy`` with integer targets picks the probability through a one-hot mask; initializers draw
from :func:`random.set_rng`'s generator (the same seed on every rank: identical networks).

Data-parallel training and batch-norm running statistics (the policy)
--------------------------------------------------------------------
Expose ``get_all_params(net, trainable=True)`` as a ModelClass's ``params``. Batch-norm ``mean``/``inv_std`` are
tagged ``trainable=False``: they are not in that list, so no rule (BSP ``cdd`` or ``avg``, EASGD, GOSGD, ASGD)
exchanges, averages or steps them. Each worker updates its own running statistics from its own shard during
training (through ``pytensor.function``'s default updates of the training output). Where a single model is
needed -- before a ``deterministic=True`` validation and before saving the final model -- call
:func:`~theanompi.nn.layers.normalization.sync_running_stats` (``net, comm``) on every worker: all workers then
hold the pooled statistics (mean of means, variance of the mixture). ``get_all_params(net)`` (no tags) and
``get_all_param_values(net)`` do include the statistics, so a saved/loaded model keeps them.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi import nn
>>> nn.random.set_rng(np.random.default_rng(0))            # the same seed on every rank
>>> net = nn.layers.InputLayer((None, 1, 8, 8))
>>> net = nn.layers.Conv2DLayer(net, 8, 3, pad="same", nonlinearity=nn.nonlinearities.rectify)
>>> net = nn.layers.MaxPool2DLayer(net, 2)
>>> net = nn.layers.DenseLayer(nn.layers.DropoutLayer(net, 0.5), 10, nonlinearity=nn.nonlinearities.softmax)
>>> x, y = nn.layers.get_all_layers(net)[0].input_var, pt.ivector("y")
>>> loss = nn.objectives.categorical_crossentropy(nn.layers.get_output(net), y).mean()
>>> params = nn.layers.get_all_params(net, trainable=True)
>>> step = pytensor.function([x, y], loss, updates=nn.updates.nesterov_momentum(loss, params, 0.01))
>>> nn.layers.get_output_shape(net), nn.layers.count_params(net)
((None, 10), 1370)
>>> images, labels = nn.utils.floatX(np.ones((4, 1, 8, 8))), np.array([0, 1, 2, 3], "int32")
>>> bool(step(images, labels) > 0)
True
"""

from theanompi.nn import init, layers, nonlinearities, objectives, random, regularization, updates, utils
from theanompi.nn.layers import *  # noqa: F403  (every layer and network function, as nn.X)
from theanompi.nn.layers import __all__ as _layer_names

__all__ = [
    *_layer_names, "init", "layers", "nonlinearities", "objectives", "random", "regularization", "updates", "utils",
]
