"""Functions over whole networks: outputs, shapes, layers, parameters (Lasagne's ``lasagne.layers.helper``).

Example
-------
>>> import numpy as np, pytensor
>>> from theanompi.nn import (InputLayer, DenseLayer, get_output, get_all_params,
...                                      count_params, nonlinearities)
>>> l_in = InputLayer((None, 4))
>>> net = DenseLayer(l_in, 3, nonlinearity=nonlinearities.softmax)
>>> f = pytensor.function([l_in.input_var], get_output(net))
>>> f(np.ones((2, 4), pytensor.config.floatX)).shape
(2, 3)
>>> [p.name for p in get_all_params(net, trainable=True)], count_params(net)
(['W', 'b'], 15)
"""

from __future__ import annotations

import difflib
import warnings
from collections import OrderedDict, deque

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.traversal import ancestors

from theanompi.nn.layers.base import Layer, MergeLayer, describe
from theanompi.nn.layers.input import InputLayer
from theanompi.nn.utils import as_expression, inspect_kwargs, unique

__all__ = [
    "count_params", "get_all_layers", "get_all_param_values", "get_all_params", "get_output", "get_output_shape",
    "get_state_updates", "set_all_param_values",
]


def _is_many(layer_or_layers):
    return isinstance(layer_or_layers, (list, tuple))


def get_all_layers(layer, treat_as_input=None):
    """All layers feeding ``layer`` (a layer or a list of layers), in topological order, itself included.

    Layers in ``treat_as_input`` are included but not expanded (their inputs are left out).

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> l1 = InputLayer((None, 2)); l2 = DenseLayer(l1, 3); l3 = DenseLayer(l2, 1)
    >>> get_all_layers(l3) == [l1, l2, l3], get_all_layers(l3, treat_as_input=[l2]) == [l2, l3]
    (True, True)
    """
    queue = deque(layer) if _is_many(layer) else deque([layer])
    seen, done, result = set(), set(), []
    if treat_as_input is not None:
        seen.update(treat_as_input)
    while queue:
        current = queue[0]
        if current is None:
            queue.popleft()
        elif current not in seen:
            if not isinstance(current, Layer) and not hasattr(current, "output_shape"):
                raise ValueError(f"get_all_layers: expected layers (anything with output_shape), got "
                                 f"{describe(current)}")
            seen.add(current)
            if hasattr(current, "input_layers"):
                queue.extendleft(reversed(current.input_layers))
            elif hasattr(current, "input_layer"):
                queue.appendleft(current.input_layer)
        else:
            queue.popleft()
            if current not in done:
                result.append(current)
                done.add(current)
    return result


def _accepted_kwargs(layer):
    """The keywords ``layer.get_output_for`` takes (those with defaults) and the layer's ``get_output_kwargs``."""
    try:
        accepted = set(inspect_kwargs(layer.get_output_for))
    except (TypeError, ValueError):
        accepted = set()
    return accepted | set(getattr(layer, "get_output_kwargs", ()))


def _warn_unused(kwargs, accepted):
    unused = sorted(set(kwargs) - accepted)
    if unused:
        hints = []
        for name in unused:
            close = difflib.get_close_matches(name, sorted(accepted), n=1)
            hints.append(f"{name} (perhaps you meant {close[0]})" if close else name)
        warnings.warn(f"get_output() was called with unused kwargs: {', '.join(hints)}", stacklevel=3)


def get_output(layer_or_layers, inputs=None, **kwargs):
    """Symbolic output(s) of a layer or list of layers.

    Parameters
    ----------
    layer_or_layers : Layer or list of Layer
    inputs : None, expression/array, or dict
        None: each InputLayer's ``input_var``. One expression (or array): the
        input of the network's only InputLayer. A dict ``{layer: expression}``
        replaces those layers' outputs (any layer, not only InputLayers).
    **kwargs
        Passed to every layer's ``get_output_for``, only those given:
        ``deterministic=True`` for inference (dropout and noise off, batch norm
        uses and does not update its running statistics), ``batch_norm_use_averages``, ...
        A keyword no layer accepts gives a warning.

    Returns
    -------
    TensorVariable or list of TensorVariable
        Training outputs (``deterministic=False``) of networks with batch norm
        or dropout carry state updates that ``pytensor.function`` applies
        automatically; :func:`get_state_updates` lists them.

    Raises
    ------
    ValueError
        When a layer's input is not defined by ``inputs`` or an InputLayer.
    TypeError
        When a key of an ``inputs`` dict is not a layer.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> l_in = InputLayer((None, 3)); net = DenseLayer(l_in, 2)
    >>> import pytensor.tensor as pt
    >>> x = pt.matrix("x")
    >>> get_output(net, x).ndim
    2
    """
    if isinstance(inputs, dict):
        bad = [key for key in inputs if key is not None and not isinstance(key, Layer)]
        if bad:
            raise TypeError(f"get_output: the keys of inputs must be layers (or None), got {describe(bad[0])}")
    treat_as_input = list(inputs.keys()) if isinstance(inputs, dict) else []
    all_layers = get_all_layers(layer_or_layers, treat_as_input)
    outputs = {layer: layer.input_var for layer in all_layers
               if isinstance(layer, InputLayer) and layer not in treat_as_input}
    if isinstance(inputs, dict):
        outputs.update((layer, as_expression(expr)) for layer, expr in inputs.items())
    elif inputs is not None:
        if len(outputs) > 1:
            raise ValueError(f"get_output: one input expression given for a network with {len(outputs)} input layers "
                             f"({list(outputs)}); pass a dict {{layer: expression}}")
        for layer in outputs:
            outputs[layer] = as_expression(inputs)
    accepted = {"deterministic"}
    for layer in all_layers:
        if layer in outputs:
            continue
        try:
            if isinstance(layer, MergeLayer):
                layer_inputs = [outputs[parent] for parent in layer.input_layers]
            else:
                layer_inputs = outputs[layer.input_layer]
        except KeyError:
            raise ValueError(f"get_output: no input expression for the free-floating layer {layer!r}; pass "
                             "inputs={layer: expression}") from None
        outputs[layer] = layer.get_output_for(layer_inputs, **kwargs)
        accepted |= _accepted_kwargs(layer)
    _warn_unused(kwargs, accepted)
    if _is_many(layer_or_layers):
        return [outputs[layer] for layer in layer_or_layers]
    return outputs[layer_or_layers]


def get_output_shape(layer_or_layers, input_shapes=None):
    """Output shape(s) of a layer or list of layers, optionally for other input shapes.

    Parameters
    ----------
    layer_or_layers : Layer or list of Layer
    input_shapes : None, tuple or dict
        None: the shapes the network was built with. A tuple: the shape of the
        only InputLayer. A dict ``{layer: shape}``.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> l_in = InputLayer((None, 3)); net = DenseLayer(l_in, 2)
    >>> get_output_shape(net, (10, 3))
    (10, 2)
    """
    if not input_shapes:
        if _is_many(layer_or_layers):
            return [layer.output_shape for layer in layer_or_layers]
        return layer_or_layers.output_shape
    treat_as_input = list(input_shapes.keys()) if isinstance(input_shapes, dict) else []
    all_layers = get_all_layers(layer_or_layers, treat_as_input)
    shapes = {layer: layer.shape for layer in all_layers
              if isinstance(layer, InputLayer) and layer not in treat_as_input}
    if isinstance(input_shapes, dict):
        shapes.update(input_shapes)
    else:
        if len(shapes) > 1:
            raise ValueError(f"get_output_shape: one input shape given for a network with {len(shapes)} input "
                             "layers; pass a dict {layer: shape}")
        for layer in shapes:
            shapes[layer] = tuple(input_shapes)
    for layer in all_layers:
        if layer in shapes:
            continue
        try:
            if isinstance(layer, MergeLayer):
                in_shapes = [shapes[parent] for parent in layer.input_layers]
            else:
                in_shapes = shapes[layer.input_layer]
        except KeyError:
            raise ValueError(f"get_output_shape: no input shape for the free-floating layer {layer!r}") from None
        shapes[layer] = layer.get_output_shape_for(in_shapes)
    if _is_many(layer_or_layers):
        return [shapes[layer] for layer in layer_or_layers]
    return shapes[layer_or_layers]


def get_all_params(layer, unwrap_shared=True, **tags):
    """Parameters of all layers of the network(s), without duplicates, in layer order.

    Parameters
    ----------
    layer : Layer or list of Layer
    **tags
        ``trainable=True`` (what an optimizer and a ModelClass's ``params``
        want), ``regularizable=True`` (what weight decay wants), ``tag=False``
        excludes. No tags: every parameter, batch-norm running statistics included.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> net = DenseLayer(InputLayer((None, 3)), 2)
    >>> [p.name for p in get_all_params(net, regularizable=True)]
    ['W']
    """
    return unique(p for sub in get_all_layers(layer) for p in sub.get_params(unwrap_shared=unwrap_shared, **tags))


def count_params(layer, **tags):
    """Number of scalar parameters (``tags`` as in :func:`get_all_params`).

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> count_params(DenseLayer((None, 3), 2))
    8
    """
    return int(sum(np.prod(p.get_value(borrow=True).shape) for p in get_all_params(layer, **tags)))


def get_all_param_values(layer, **tags):
    """Copies of the values of :func:`get_all_params` (numpy arrays, same order).

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> [v.shape for v in get_all_param_values(DenseLayer((None, 3), 2))]
    [(3, 2), (2,)]
    """
    return [p.get_value() for p in get_all_params(layer, **tags)]


def set_all_param_values(layer, values, **tags):
    """Set the parameters of :func:`get_all_params` (same ``tags``) from a list of arrays.

    Raises
    ------
    ValueError
        When the number of values or a value's shape does not match (the
        message names the parameter); nothing is set then.

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> net = DenseLayer((None, 3), 2)
    >>> set_all_param_values(net, [np.ones((3, 2)), np.zeros(2)])
    >>> float(net.W.get_value().sum())
    6.0
    """
    params = get_all_params(layer, **tags)
    values = list(values)
    if len(params) != len(values):
        raise ValueError(f"set_all_param_values: got {len(values)} values for {len(params)} parameters "
                         f"{[p.name for p in params]}")
    arrays = []
    for i, (p, v) in enumerate(zip(params, values)):
        v = np.asarray(v)
        expected = p.get_value(borrow=True).shape
        if v.shape != expected:
            raise ValueError(f"set_all_param_values: value {i} for parameter {p.name!r} has shape {v.shape}, "
                             f"expected {expected}")
        arrays.append(v.astype(p.dtype))
    for p, v in zip(params, arrays):
        p.set_value(v)


def get_state_updates(outputs):
    """The state updates that training outputs carry: ``OrderedDict(shared -> new value)``.

    Batch-norm running statistics and random generator states are updated by
    ``pytensor.function`` automatically (``default_update``); use this to see
    them, to pass them explicitly (``pytensor.function(..., updates=...)``: an
    explicit update of a variable replaces its default update; pytensor 3
    deprecates default updates, so explicit updates are the future-proof way)
    or to check that a graph has none.

    Example
    -------
    >>> from theanompi.nn import BatchNormLayer, InputLayer
    >>> net = BatchNormLayer(InputLayer((None, 3)))
    >>> [v.name for v in get_state_updates(get_output(net))]
    ['mean', 'inv_std']
    >>> len(get_state_updates(get_output(net, deterministic=True)))
    0
    """
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    found = [var for var in ancestors(outs)
             if isinstance(var, SharedVariable) and getattr(var.tag, "layer_update", None) is not None]
    found.sort(key=lambda var: getattr(var.tag, "layer_update_order", 0))
    return OrderedDict((var, var.tag.layer_update) for var in found)
