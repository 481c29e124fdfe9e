"""A Lasagne-style layer library on pytensor: ``import theanompi.models.layers as L``.

Lasagne cannot be installed next to pytensor (it imports theano); this package
gives its users the same idioms (and :mod:`theanompi.lasagne` its module
tree, so ``import lasagne`` code runs unchanged). Layers: :class:`InputLayer`,
:class:`DenseLayer`, :class:`NonlinearityLayer`, :class:`ExpressionLayer`,
:class:`Conv2DLayer`, :class:`TransposedConv2DLayer` (= ``Deconv2DLayer``),
:class:`Pool2DLayer`/:class:`MaxPool2DLayer`, :class:`GlobalPoolLayer`,
:class:`BatchNormLayer` (+ :func:`batch_norm`),
:class:`LocalResponseNormalization2DLayer`, :class:`DropoutLayer`,
:class:`GaussianNoiseLayer`, :class:`FlattenLayer`, :class:`ReshapeLayer`,
:class:`DimshuffleLayer`, :class:`PadLayer`, :class:`ElemwiseSumLayer`,
:class:`ConcatLayer`, :class:`LSTMLayer`, and every other layer of Lasagne (recurrent, special,
local, embedding, transformer modules). Network functions: :func:`get_output`,
:func:`get_output_shape`, :func:`get_all_layers`, :func:`get_all_params`,
:func:`count_params`, :func:`get_all_param_values`,
:func:`set_all_param_values`, :func:`get_state_updates`. Modules (as in
Lasagne): :mod:`.init`, :mod:`.nonlinearities`, :mod:`.objectives`,
:mod:`.updates`, :mod:`.regularization`, :mod:`.utils`.

Differences from Lasagne: ``Conv2DLayer(flip_filters=False)`` and
``TransposedConv2DLayer(flip_filters=True)`` by default (no filter flip in the
graph; the other value for weights trained with Lasagne's defaults);
``categorical_crossentropy`` with integer targets picks the probability through a one-hot mask; initializers draw
from :func:`init.set_rng`'s generator (same seed on every rank = identical
networks).

Data-parallel training and batch-norm running statistics (the policy)
--------------------------------------------------------------------
Expose ``get_all_params(net, trainable=True)`` as a ModelClass's ``params``.
Batch-norm ``mean``/``inv_std`` are tagged ``trainable=False``: they are not in
that list, so no rule (BSP ``cdd`` or ``avg``, EASGD, GOSGD, ASGD) exchanges,
averages or steps them. Each worker updates its own running statistics from
its own shard during training (through ``pytensor.function``'s default
updates of the training output). Where a single model is needed — before a
``deterministic=True`` validation and before saving the final model — call
:func:`sync_running_stats` (``net, comm``) on every worker: all workers then
hold the pooled statistics (mean of means, variance of the mixture).
``get_all_params(net)`` (no tags) and ``get_all_param_values(net)`` do include
the statistics, so a saved/loaded model keeps them.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> import theanompi.models.layers as L
>>> L.init.set_rng(np.random.default_rng(0))            # same on every rank
>>> net = L.InputLayer((None, 1, 8, 8))
>>> net = L.Conv2DLayer(net, 8, 3, pad="same")
>>> net = L.MaxPool2DLayer(net, 2)
>>> net = L.DenseLayer(L.DropoutLayer(net, 0.5), 10, nonlinearity=L.nonlinearities.softmax)
>>> y = pt.ivector("y")
>>> loss = L.objectives.categorical_crossentropy(L.get_output(net), y).mean()
>>> params = L.get_all_params(net, trainable=True)
>>> step = pytensor.function([L.get_all_layers(net)[0].input_var, y], loss,
...                          updates=L.updates.nesterov_momentum(loss, params, 0.01))
>>> L.get_output_shape(net), L.count_params(net)
((None, 10), 1370)
"""

from theanompi.models.layers import init, nonlinearities, objectives, regularization, updates, utils
from theanompi.models.layers.base import Layer, MergeLayer, attach_update, create_param, set_state_update
from theanompi.models.layers.conv import (
    BaseConvLayer,
    Conv1DLayer,
    Conv2DLayer,
    Conv3DLayer,
    Deconv2DLayer,
    Deconv3DLayer,
    DilatedConv2DLayer,
    TransposedConv2DLayer,
    TransposedConv3DLayer,
    conv_input_length,
    conv_output_length,
)
from theanompi.models.layers.dense import DenseLayer, NINLayer, NonlinearityLayer
from theanompi.models.layers.embedding import EmbeddingLayer
from theanompi.models.layers.helper import (
    count_params,
    get_all_layers,
    get_all_param_values,
    get_all_params,
    get_output,
    get_output_shape,
    get_state_updates,
    set_all_param_values,
)
from theanompi.models.layers.input import InputLayer
from theanompi.models.layers.local import LocallyConnected2DLayer
from theanompi.models.layers.merge import (
    ConcatLayer,
    ElemwiseMergeLayer,
    ElemwiseSumLayer,
    autocrop,
    autocrop_array_shapes,
    concat,
)
from theanompi.models.layers.noise import (
    DropoutLayer,
    GaussianNoiseLayer,
    dropout,
    dropout_channels,
    dropout_locations,
    spatial_dropout,
)
from theanompi.models.layers.normalization import (
    BatchNormLayer,
    LocalResponseNormalization2DLayer,
    StandardizationLayer,
    batch_norm,
    get_running_stats,
    instance_norm,
    layer_norm,
    pool_running_stats,
    sync_running_stats,
)
from theanompi.models.layers.pool import (
    FeaturePoolLayer,
    FeatureWTALayer,
    GlobalPoolLayer,
    MaxPool1DLayer,
    MaxPool2DLayer,
    MaxPool3DLayer,
    Pool1DLayer,
    Pool2DLayer,
    Pool3DLayer,
    SpatialPyramidPoolingLayer,
    Upscale1DLayer,
    Upscale2DLayer,
    Upscale3DLayer,
    pool_2d,
    pool_output_length,
)
from theanompi.models.layers.recurrent import CustomRecurrentLayer, Gate, GRULayer, LSTMLayer, RecurrentLayer
from theanompi.models.layers.shape import (
    DimshuffleLayer,
    FlattenLayer,
    PadLayer,
    ReshapeLayer,
    SliceLayer,
    dimshuffle,
    flatten,
    pad,
    pad_tensor,
    reshape,
)
from theanompi.models.layers.special import (
    BiasLayer,
    ExpressionLayer,
    InverseLayer,
    ParametricRectifierLayer,
    RandomizedRectifierLayer,
    ScaleLayer,
    prelu,
    rrelu,
    standardize,
)
from theanompi.models.layers.transformer import TPSTransformerLayer, TransformerLayer

__all__ = [
    "attach_update", "autocrop", "autocrop_array_shapes", "BaseConvLayer", "batch_norm", "BatchNormLayer", "BiasLayer",
    "concat", "ConcatLayer", "Conv1DLayer", "Conv2DLayer", "Conv3DLayer", "conv_input_length", "conv_output_length",
    "count_params", "create_param", "CustomRecurrentLayer", "Deconv2DLayer", "Deconv3DLayer", "DenseLayer",
    "DilatedConv2DLayer", "dimshuffle", "DimshuffleLayer", "dropout", "dropout_channels", "dropout_locations",
    "DropoutLayer", "ElemwiseMergeLayer", "ElemwiseSumLayer", "EmbeddingLayer", "ExpressionLayer", "FeaturePoolLayer",
    "FeatureWTALayer", "flatten", "FlattenLayer", "Gate", "GaussianNoiseLayer", "get_all_layers",
    "get_all_param_values", "get_all_params", "get_output", "get_output_shape", "get_running_stats",
    "get_state_updates", "GlobalPoolLayer", "GRULayer", "init", "InputLayer", "instance_norm", "InverseLayer", "Layer",
    "layer_norm", "LocallyConnected2DLayer", "LocalResponseNormalization2DLayer", "LSTMLayer", "MaxPool1DLayer",
    "MaxPool2DLayer", "MaxPool3DLayer", "MergeLayer", "NINLayer", "nonlinearities", "NonlinearityLayer", "objectives",
    "pad", "pad_tensor", "PadLayer", "ParametricRectifierLayer", "Pool1DLayer", "Pool2DLayer", "Pool3DLayer", "pool_2d",
    "pool_output_length", "pool_running_stats", "prelu", "RandomizedRectifierLayer", "RecurrentLayer", "regularization",
    "reshape", "ReshapeLayer", "rrelu", "ScaleLayer", "set_all_param_values", "set_state_update", "SliceLayer",
    "spatial_dropout", "SpatialPyramidPoolingLayer", "StandardizationLayer", "standardize", "sync_running_stats",
    "TPSTransformerLayer", "TransformerLayer", "TransposedConv2DLayer", "TransposedConv3DLayer", "updates",
    "Upscale1DLayer", "Upscale2DLayer", "Upscale3DLayer", "utils",
]
