"""Network helpers of :mod:`theanompi.models.layers2`: walk the layers, collect and count parameters.

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.models.layers2 import FC, Softmax
>>> fc = FC(pt.matrix("x"), 4, None, None, input_shape=(2, 3), printinfo=False)
>>> params, types = get_params(get_layers(Softmax(fc, 2, printinfo=False)))
>>> types, extract_weight_types(params), count_params(params, verbose=False)
(['W', 'b', 'W', 'b'], ['W', 'b', 'W', 'b'], 26)
"""

from __future__ import annotations

import numpy as np

__all__ = ["count_params", "extract_weight_types", "get_layers", "get_params"]


def get_layers(lastlayer) -> list:
    """The chain of layers ending at ``lastlayer``, first layer first (following ``.input_layer``)."""
    if not hasattr(lastlayer, "output"):
        raise ValueError(f"get_layers: lastlayer must be a layer with .output, got {type(lastlayer).__name__}")
    layers = [lastlayer]
    while hasattr(layers[-1], "input_layer"):
        layers.append(layers[-1].input_layer)
    return layers[::-1]


def get_params(layers) -> tuple[list, list]:
    """``(params, weight_types)`` of every layer that has ``.params``, in layer order."""
    params, weight_types = [], []
    for layer in layers:
        if hasattr(layer, "params"):
            if len(getattr(layer, "weight_type", ())) != len(layer.params):
                raise ValueError(f"get_params: layer {type(layer).__name__} has {len(layer.params)} params but "
                                 f"weight_type {getattr(layer, 'weight_type', None)!r}")
            params += layer.params
            weight_types += layer.weight_type
    return params, weight_types


def _shape(param) -> tuple[int, ...]:
    if hasattr(param, "get_value"):
        return tuple(param.get_value(borrow=True).shape)
    return tuple(int(d) for d in param.shape.eval())


def count_params(params, verbose) -> int:
    """Number of floats in ``params``; with ``verbose`` prints each shape and the total in M floats."""
    total = 0
    for param in params:
        shape = _shape(param)
        total += int(np.prod(shape, dtype="int64"))
        if verbose:
            print(shape)
    if verbose:
        print(f"model size {total / 2**20:.3f} M floats")
    return total


def extract_weight_types(params) -> list[str]:
    """``'W'`` for parameters with more than one dimension, ``'b'`` for the others."""
    return ["W" if len(_shape(param)) > 1 else "b" for param in params]
