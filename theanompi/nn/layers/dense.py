"""Fully connected layers: :class:`DenseLayer`, :class:`NINLayer` (network in network) and :class:`NonlinearityLayer`.

Example
-------
>>> from theanompi.nn import InputLayer, DenseLayer, nonlinearities
>>> l = DenseLayer(InputLayer((None, 64)), num_units=10, nonlinearity=nonlinearities.softmax)
>>> l.output_shape, l.W.get_value().shape
((None, 10), (64, 10))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt

from theanompi.nn import init, nonlinearities
from theanompi.nn.layers.base import Layer

__all__ = ["DenseLayer", "NINLayer", "NonlinearityLayer"]


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
        if num_leading_axes >= ndim:
            raise ValueError(f"DenseLayer: num_leading_axes={num_leading_axes} for an input of shape "
                             f"{self.input_shape}, leaving no trailing axes to multiply with W; use 1..{ndim - 1} "
                             f"or -{ndim - 1}..-1")
        if num_leading_axes < -ndim + 1:
            raise ValueError(f"DenseLayer: num_leading_axes={num_leading_axes} for an input of shape "
                             f"{self.input_shape}, requesting more trailing axes than there are (at least one "
                             f"leading axis must remain); use 1..{ndim - 1} or -{ndim - 1}..-1")
        if num_leading_axes == 0:
            raise ValueError(f"DenseLayer: num_leading_axes must not be 0 (at least one leading axis); use "
                             f"1..{ndim - 1} or -{ndim - 1}..-1")
        if num_leading_axes < 0:
            num_leading_axes += ndim
        self.num_leading_axes = num_leading_axes
        trailing = self.input_shape[num_leading_axes:]
        if any(s is None for s in trailing):
            raise ValueError(f"DenseLayer requires a fixed input shape (except for the {num_leading_axes} leading "
                             f"axes), got input shape {self.input_shape}")
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
    >>> from theanompi.nn import nonlinearities
    >>> NonlinearityLayer((None, 3), nonlinearities.tanh).output_shape
    (None, 3)
    """

    def __init__(self, incoming, nonlinearity=nonlinearities.rectify, **kwargs):
        super().__init__(incoming, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity

    def get_output_for(self, input, **kwargs):
        return self.nonlinearity(input)


class NINLayer(Layer):
    """Network-in-network: a dense layer applied at every position, over the channels (axis 1).

    ``output[:, u, ...] = nonlinearity(sum_c input[:, c, ...] * W[c, u] + b[u, ...])``: a 1x1 convolution.

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, channels, positions...); the channels known.
    num_units : int
        Output channels.
    untie_biases : bool
        False: one bias per unit (num_units,); True: one per unit and position (num_units, positions...).
    W : initializer, array or shared variable
        (channels, num_units).
    b : initializer, array, shared variable or None
    nonlinearity : callable or None

    Example
    -------
    >>> l = NINLayer((None, 3, 4, 5), 6, untie_biases=True)
    >>> l.output_shape, l.W.get_value().shape, l.b.get_value().shape
    ((None, 6, 4, 5), (3, 6), (6, 4, 5))
    """

    def __init__(self, incoming, num_units, untie_biases=False, W=init.GlorotUniform(), b=init.Constant(0.0),
                 nonlinearity=nonlinearities.rectify, **kwargs):
        super().__init__(incoming, **kwargs)
        if isinstance(num_units, bool) or not isinstance(num_units, numbers.Integral) or num_units < 1:
            raise ValueError(f"NINLayer: num_units must be a positive int, got {num_units!r}")
        if len(self.input_shape) < 2 or self.input_shape[1] is None:
            raise ValueError(f"NINLayer: the input must have a known channel axis 1, got input shape "
                             f"{self.input_shape}")
        self.num_units = int(num_units)
        self.untie_biases = bool(untie_biases)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.W = self.add_param(W, (self.input_shape[1], self.num_units), name="W")
        if b is None:
            self.b = None
        else:
            positions = tuple(self.input_shape[2:]) if self.untie_biases else ()
            if None in positions:
                raise ValueError(f"NINLayer: untie_biases=True needs known positions, got input shape "
                                 f"{self.input_shape}")
            self.b = self.add_param(b, (self.num_units, *positions), name="b", regularizable=False)

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_units, *input_shape[2:])

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        positions = tuple(range(2, input.ndim))
        out = pt.tensordot(input, self.W, axes=[[1], [0]]).dimshuffle(0, input.ndim - 1, *range(1, input.ndim - 1))
        if self.b is not None:
            pattern = ("x", *range(self.b.ndim)) if self.untie_biases else ("x", 0, *(["x"] * len(positions)))
            out = out + self.b.dimshuffle(*pattern)
        return self.nonlinearity(out)
