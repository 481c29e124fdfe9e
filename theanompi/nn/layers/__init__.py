"""The layers of :mod:`theanompi.nn` and the functions that walk a network of them (Lasagne's ``lasagne.layers``).

A network is its output layer: each layer holds the layer(s) below it, and :func:`get_output` builds the pytensor
expression of the whole graph. One module per family, as in Lasagne: :mod:`.base` (:class:`Layer`,
:class:`MergeLayer`, parameters), :mod:`.input`, :mod:`.dense` (:class:`DenseLayer`, :class:`NINLayer`,
:class:`NonlinearityLayer`), :mod:`.conv` (1-D to 3-D, transposed, dilated), :mod:`.pool` (pooling, upscaling,
spatial pyramid), :mod:`.normalization` (:class:`BatchNormLayer` + :func:`batch_norm`, LRN, layer and instance
norm), :mod:`.noise` (dropout, Gaussian noise), :mod:`.shape` (flatten, reshape, dimshuffle, pad, slice),
:mod:`.merge` (sum, concatenation), :mod:`.recurrent` (:class:`LSTMLayer`, :class:`GRULayer`, ...),
:mod:`.special` (expression, bias, scale, PReLU, ...), :mod:`.transformer` (spatial transformers),
:mod:`.local` (locally connected), :mod:`.embedding`; :mod:`.helper` holds the network functions
(:func:`get_output`, :func:`get_all_params`, :func:`get_all_param_values`, :func:`count_params`, ...).
Every name of this package is also a name of :mod:`theanompi.nn`.

Example
-------
>>> from theanompi.nn.layers import InputLayer, DenseLayer, get_all_params, get_output_shape
>>> net = DenseLayer(InputLayer((None, 20)), num_units=5)
>>> get_output_shape(net), [p.name for p in get_all_params(net, trainable=True)]
((None, 5), ['W', 'b'])
"""

from theanompi.nn.layers.base import Layer, MergeLayer, attach_update, create_param, set_state_update
from theanompi.nn.layers.conv import (
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
from theanompi.nn.layers.dense import DenseLayer, NINLayer, NonlinearityLayer
from theanompi.nn.layers.embedding import EmbeddingLayer
from theanompi.nn.layers.helper import (
    count_params,
    get_all_layers,
    get_all_param_values,
    get_all_params,
    get_output,
    get_output_shape,
    get_state_updates,
    set_all_param_values,
)
from theanompi.nn.layers.input import InputLayer
from theanompi.nn.layers.local import LocallyConnected2DLayer
from theanompi.nn.layers.merge import (
    ConcatLayer,
    ElemwiseMergeLayer,
    ElemwiseSumLayer,
    autocrop,
    autocrop_array_shapes,
    concat,
)
from theanompi.nn.layers.noise import (
    DropoutLayer,
    GaussianNoiseLayer,
    dropout,
    dropout_channels,
    dropout_locations,
    spatial_dropout,
)
from theanompi.nn.layers.normalization import (
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
from theanompi.nn.layers.pool import (
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
from theanompi.nn.layers.recurrent import CustomRecurrentLayer, Gate, GRULayer, LSTMLayer, RecurrentLayer
from theanompi.nn.layers.shape import (
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
from theanompi.nn.layers.special import (
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
from theanompi.nn.layers.transformer import TPSTransformerLayer, TransformerLayer

__all__ = [
    "attach_update", "autocrop", "autocrop_array_shapes", "BaseConvLayer", "batch_norm", "BatchNormLayer", "BiasLayer",
    "concat", "ConcatLayer", "Conv1DLayer", "Conv2DLayer", "Conv3DLayer", "conv_input_length", "conv_output_length",
    "count_params", "create_param", "CustomRecurrentLayer", "Deconv2DLayer", "Deconv3DLayer", "DenseLayer",
    "DilatedConv2DLayer", "dimshuffle", "DimshuffleLayer", "dropout", "dropout_channels", "dropout_locations",
    "DropoutLayer", "ElemwiseMergeLayer", "ElemwiseSumLayer", "EmbeddingLayer", "ExpressionLayer", "FeaturePoolLayer",
    "FeatureWTALayer", "flatten", "FlattenLayer", "Gate", "GaussianNoiseLayer", "get_all_layers",
    "get_all_param_values", "get_all_params", "get_output", "get_output_shape", "get_running_stats",
    "get_state_updates", "GlobalPoolLayer", "GRULayer", "InputLayer", "instance_norm", "InverseLayer", "Layer",
    "layer_norm", "LocallyConnected2DLayer", "LocalResponseNormalization2DLayer", "LSTMLayer", "MaxPool1DLayer",
    "MaxPool2DLayer", "MaxPool3DLayer", "MergeLayer", "NINLayer", "NonlinearityLayer", "pad", "pad_tensor", "PadLayer",
    "ParametricRectifierLayer", "Pool1DLayer", "Pool2DLayer", "Pool3DLayer", "pool_2d", "pool_output_length",
    "pool_running_stats", "prelu", "RandomizedRectifierLayer", "RecurrentLayer", "reshape", "ReshapeLayer", "rrelu",
    "ScaleLayer", "set_all_param_values", "set_state_update", "SliceLayer", "spatial_dropout",
    "SpatialPyramidPoolingLayer", "StandardizationLayer", "standardize", "sync_running_stats", "TPSTransformerLayer",
    "TransformerLayer", "TransposedConv2DLayer", "TransposedConv3DLayer", "Upscale1DLayer", "Upscale2DLayer",
    "Upscale3DLayer",
]
