"""Weight-decay penalties over layers' parameters (Lasagne's ``lasagne.regularization``).

A penalty is a function of one tensor returning a scalar (:func:`l2`,
:func:`l1`); the functions here sum it over the parameters picked by tags
(``regularizable=True`` by default: weights, not biases or batch-norm
statistics).

Example
-------
>>> from theanompi.nn import InputLayer, DenseLayer, regularization
>>> net = DenseLayer(DenseLayer(InputLayer((None, 4)), 3), 2)
>>> penalty = regularization.regularize_network_params(net, regularization.l2)
>>> penalty.ndim
0
"""

from __future__ import annotations

from theanompi.nn.layers.helper import get_all_params
from theanompi.nn.objectives import l1, l2

__all__ = [
    "apply_penalty", "l1", "l2", "regularize_layer_params", "regularize_layer_params_weighted",
    "regularize_network_params",
]

_REGULARIZABLE = {"regularizable": True}


def apply_penalty(tensor_or_tensors, penalty, **kwargs):
    """``sum(penalty(t, **kwargs) for t in tensors)`` (one tensor: ``penalty(tensor, **kwargs)``).

    An empty list (e.g. the parameters of a pooling layer) gives the Python
    int 0, as in Lasagne: adding it to a loss leaves the loss as it is.

    Example
    -------
    >>> import numpy as np, pytensor
    >>> w = pytensor.shared(np.full(3, 2.0))
    >>> float(apply_penalty([w, w], l2).eval()), apply_penalty([], l2)
    (24.0, 0)
    """
    if isinstance(tensor_or_tensors, (list, tuple)):
        return sum(penalty(t, **kwargs) for t in tensor_or_tensors)
    return penalty(tensor_or_tensors, **kwargs)


def regularize_layer_params(layer, penalty, tags=_REGULARIZABLE, **kwargs):
    """Penalty over the parameters (with ``tags``) of ``layer`` or a list of layers only, not of their inputs.

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> top = DenseLayer((None, 3), 2)
    >>> regularize_layer_params([top], l1).ndim
    0
    """
    layers = layer if isinstance(layer, (list, tuple)) else [layer]
    params = [p for lay in layers for p in lay.get_params(**tags)]
    return apply_penalty(params, penalty, **kwargs)


def regularize_layer_params_weighted(layers, penalty, tags=_REGULARIZABLE, **kwargs):
    """``sum(coeff * penalty over layer's params)`` for a dict ``{layer: coeff}``.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> a = DenseLayer(InputLayer((None, 3)), 2); b = DenseLayer(a, 1)
    >>> regularize_layer_params_weighted({a: 0.1, b: 0.01}, l2).ndim
    0
    """
    return sum(coeff * apply_penalty(layer.get_params(**tags), penalty, **kwargs) for layer, coeff in layers.items())


def regularize_network_params(layer, penalty, tags=_REGULARIZABLE, **kwargs):
    """Penalty over the parameters (with ``tags``) of every layer of the network ending in ``layer``.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> regularize_network_params(DenseLayer(InputLayer((None, 3)), 2), l2).ndim
    0
    """
    return apply_penalty(get_all_params(layer, **tags), penalty, **kwargs)
