"""Fully connected layers: :class:`DenseLayer` and :class:`NonlinearityLayer`.

Example
-------
>>> from theanompi.models.layers import InputLayer, DenseLayer, nonlinearities
>>> l = DenseLayer(InputLayer((None, 64)), num_units=10, nonlinearity=nonlinearities.softmax)
>>> l.output_shape, l.W.get_value().shape
((None, 10), (64, 10))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt

from theanompi.models.layers import init, nonlinearities
from theanompi.models.layers.base import Layer

__all__ = ["DenseLayer", "NonlinearityLayer"]


class DenseLayer(Layer):
    """``nonlinearity(dot(input, W) + b)``.

    Parameters
    ----------
    incoming : Layer or tuple
    num_units : int
        Number of output units.
    W : initializer, array or shared variable
        Weights of shape (num_inputs, num_units), where num_inputs is the
        product of the input's trailing dimensions (after the leading axes).
    b : initializer, array, shared variable or None
        Biases of shape (num_units,) (tagged ``regularizable=False``); None: no bias.
    nonlinearity : callable or None
        None means linear.
    num_leading_axes : int
        Input axes kept as they are (1: a batch of vectors; the remaining axes
        are flattened). Negative values count from the end.

    Example
    -------
    >>> l = DenseLayer((None, 5, 4), 3, num_leading_axes=2)
    >>> l.output_shape
    (None, 5, 3)
    """

    def __init__(self, incoming, num_units, W=init.GlorotUniform(), b=init.Constant(0.0),
                 nonlinearity=nonlinearities.rectify, num_leading_axes=1, **kwargs):
        super().__init__(incoming, **kwargs)
        if isinstance(num_units, bool) or not isinstance(num_units, numbers.Integral) or num_units < 1:
            raise ValueError(f"DenseLayer: num_units must be a positive int, got {num_units!r}")
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.num_units = int(num_units)
        ndim = len(self.input_shape)
        if num_leading_axes >= ndim or num_leading_axes < -ndim + 1 or num_leading_axes == 0:
            raise ValueError(f"DenseLayer: num_leading_axes={num_leading_axes} is not possible for an input "
                             f"of shape {self.input_shape}; use 1..{ndim - 1} or -{ndim - 1}..-1")
        if num_leading_axes < 0:
            num_leading_axes += ndim
        self.num_leading_axes = num_leading_axes
        trailing = self.input_shape[num_leading_axes:]
        if any(s is None for s in trailing):
            raise ValueError(f"DenseLayer: the input dimensions after the {num_leading_axes} leading axes must "
                             f"be known, got input shape {self.input_shape}")
        num_inputs = int(np.prod(trailing))
        self.W = self.add_param(W, (num_inputs, self.num_units), name="W")
        self.b = None if b is None else self.add_param(b, (self.num_units,), name="b", regularizable=False)

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[: self.num_leading_axes]) + (self.num_units,)

    def get_output_for(self, input, **kwargs):
        if input.ndim > self.num_leading_axes + 1:
            input = input.flatten(self.num_leading_axes + 1)
        activation = pt.dot(input, self.W)
        if self.b is not None:
            activation = activation + self.b
        return self.nonlinearity(activation)


class NonlinearityLayer(Layer):
    """Applies ``nonlinearity`` elementwise.

    Example
    -------
    >>> from theanompi.models.layers import nonlinearities
    >>> NonlinearityLayer((None, 3), nonlinearities.tanh).output_shape
    (None, 3)
    """

    def __init__(self, incoming, nonlinearity=nonlinearities.rectify, **kwargs):
        super().__init__(incoming, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity

    def get_output_for(self, input, **kwargs):
        return self.nonlinearity(input)
