"""Layers of Lasagne's ``lasagne.layers.special``: expressions, biases and scales, inverses, learned rectifiers.

:class:`ExpressionLayer` applies a function; :class:`BiasLayer` and
:class:`ScaleLayer` add and multiply learned tensors shared over some axes
(:func:`standardize` fixes both to normalise inputs); :class:`InverseLayer`
back-propagates through another layer; :class:`ParametricRectifierLayer`
(:func:`prelu`) learns the negative slopes of a rectifier and
:class:`RandomizedRectifierLayer` (:func:`rrelu`) draws them while training.
The spatial transformers live in :mod:`~theanompi.nn.layers.transformer`.

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.nn import InputLayer, ExpressionLayer
>>> ExpressionLayer(InputLayer((None, 3, 4)), lambda x: x.mean(axis=2), output_shape="auto").output_shape
(None, 3)
>>> BiasLayer((None, 3, 4, 4)).b.get_value().shape
(3,)
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.nn import init, nonlinearities
from theanompi.nn.layers.base import Layer, MergeLayer
from theanompi.nn.layers.noise import RandomDrawLayer
from theanompi.nn.utils import as_expression, floatX

__all__ = [
    "BiasLayer", "ExpressionLayer", "InverseLayer", "ParametricRectifierLayer", "RandomizedRectifierLayer",
    "ScaleLayer", "prelu", "rrelu", "standardize",
]


class ExpressionLayer(Layer):
    """Applies ``function(input)`` (any pytensor expression of the input tensor).

    Parameters
    ----------
    incoming : Layer or tuple
    function : callable
        ``function(tensor) -> tensor``.
    output_shape : None, tuple, callable or 'auto'
        None: the input shape. A tuple: that shape. A callable:
        ``output_shape(input_shape) -> shape``. ``'auto'``: found by applying
        ``function`` to a zero array of the input shape (unknown dimensions
        taken as 1 and, where the result changes with them, reported as None).

    Raises
    ------
    ValueError
        For a ``function`` that is not callable or an ``output_shape`` of
        another kind.

    Example
    -------
    >>> l = ExpressionLayer((None, 4), lambda x: pt.concatenate([x, -x], axis=1),
    ...                     output_shape=lambda s: (s[0], 2 * s[1]))
    >>> l.output_shape
    (None, 8)
    """

    def __init__(self, incoming, function, output_shape=None, **kwargs):
        super().__init__(incoming, **kwargs)
        if not callable(function):
            raise ValueError(f"ExpressionLayer: function must be callable, got {function!r}")
        if not (output_shape is None or output_shape == "auto" or callable(output_shape)
                or isinstance(output_shape, tuple)):
            raise ValueError(f"ExpressionLayer: output_shape must be None, a tuple, a callable or 'auto', "
                             f"got {output_shape!r}")
        self.function = function
        self._output_shape = output_shape

    def get_output_shape_for(self, input_shape):
        spec = self._output_shape
        if spec is None:
            return input_shape
        if isinstance(spec, str):
            return self._infer_shape(input_shape)
        if callable(spec):
            return tuple(spec(input_shape))
        return spec

    def _infer_shape(self, input_shape):
        """Evaluate the function on zeros twice (unknown sizes 1 and 2): sizes that differ are unknown."""
        results = []
        for unknown in (1, 2):
            shape = tuple(unknown if s is None else s for s in input_shape)
            x = pt.constant(np.zeros(shape, dtype=pytensor.config.floatX))
            results.append(tuple(int(s) for s in pt.as_tensor_variable(self.function(x)).shape.eval()))
        first, second = results
        return tuple(a if a == b else None for a, b in zip(first, second))

    def get_output_for(self, input, **kwargs):
        return self.function(input)


def shared_axes_tuple(shared_axes, ndim, who, allow_all=False):
    """Lasagne's ``shared_axes`` argument as a tuple of axes of an ``ndim``-dimensional input.

    ``'auto'``: every axis but the second (the channels or units); ``'all'``
    (where ``allow_all``): every axis; an int or a sequence of ints (negative
    ones count from the end).

    Example
    -------
    >>> shared_axes_tuple("auto", 4, "BiasLayer"), shared_axes_tuple(-1, 3, "BiasLayer")
    ((0, 2, 3), (2,))
    """
    if isinstance(shared_axes, str):
        if shared_axes == "auto":
            return (0,) + tuple(range(2, ndim))
        if shared_axes == "all" and allow_all:
            return tuple(range(ndim))
        choices = "'auto', 'all'" if allow_all else "'auto'"
        raise ValueError(f"{who}: shared_axes must be {choices}, an int or a tuple of ints, got {shared_axes!r}")
    axes = (shared_axes,) if isinstance(shared_axes, numbers.Integral) else tuple(shared_axes)
    if not all(isinstance(a, numbers.Integral) and -ndim <= a < ndim for a in axes):
        raise ValueError(f"{who}: shared_axes {shared_axes!r} must be axes of the {ndim}-dimensional input")
    return tuple(int(a) % ndim for a in axes)


def _per_axis_shape(input_shape, shared_axes, who, what):
    """The shape of a tensor with one entry per input position outside ``shared_axes`` (sizes must be known)."""
    shape = tuple(size for axis, size in enumerate(input_shape) if axis not in shared_axes)
    if any(size is None for size in shape):
        raise ValueError(f"{who} needs specified input sizes for all axes that {what} are not shared over; "
                         f"input shape {input_shape}, shared_axes {shared_axes}")
    return shape


def _broadcast_over(param, shared_axes, ndim):
    """``param`` with broadcastable axes inserted at ``shared_axes``, to combine with an ``ndim``-dimensional input."""
    kept = iter(range(param.ndim))
    return param.dimshuffle(*["x" if axis in shared_axes else next(kept) for axis in range(ndim)])


class BiasLayer(Layer):
    """Adds a learned bias, shared over ``shared_axes``: ``input + b``.

    Parameters
    ----------
    incoming : Layer or tuple
    b : initializer, array, expression or None
        The bias, of the input's shape without the ``shared_axes``; None: no
        bias (the layer passes its input through).
    shared_axes : 'auto', int or tuple of int
        Axes sharing one bias; ``'auto'``: all but the second (one bias per
        unit of a dense layer, per channel of a convolution).

    Raises
    ------
    ValueError
        When an input size the bias needs is unknown.

    Example
    -------
    >>> BiasLayer((20, 30, 40, 50), shared_axes=(0, 2)).b.get_value().shape
    (30, 50)
    """

    def __init__(self, incoming, b=init.Constant(0), shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        self.shared_axes = shared_axes_tuple(shared_axes, len(self.input_shape), "BiasLayer")
        if b is None:
            self.b = None
        else:
            shape = _per_axis_shape(self.input_shape, self.shared_axes, "BiasLayer", "biases")
            self.b = self.add_param(b, shape, "b", regularizable=False)

    def get_output_for(self, input, **kwargs):
        if self.b is None:
            return input
        input = as_expression(input)
        return input + _broadcast_over(self.b, self.shared_axes, input.ndim)


class ScaleLayer(Layer):
    """Multiplies by learned scales, shared over ``shared_axes``: ``input * scales``.

    Parameters
    ----------
    incoming : Layer or tuple
    scales : initializer, array or expression
        Of the input's shape without the ``shared_axes``.
    shared_axes : 'auto', int or tuple of int
        As for :class:`BiasLayer`.

    Example
    -------
    >>> ScaleLayer((20, 30, 40, 50), shared_axes=(0, 2)).scales.get_value().shape
    (30, 50)
    """

    def __init__(self, incoming, scales=init.Constant(1), shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        self.shared_axes = shared_axes_tuple(shared_axes, len(self.input_shape), "ScaleLayer")
        shape = _per_axis_shape(self.input_shape, self.shared_axes, "ScaleLayer", "scales")
        self.scales = self.add_param(scales, shape, "scales", regularizable=False)

    def get_output_for(self, input, **kwargs):
        input = as_expression(input)
        return input * _broadcast_over(self.scales, self.shared_axes, input.ndim)


def standardize(layer, offset, scale, shared_axes="auto"):
    """``(input - offset) / scale`` with fixed statistics: a :class:`BiasLayer`, then a :class:`ScaleLayer`.

    Parameters
    ----------
    layer : Layer or tuple
    offset, scale : array or shared variable
        Of the input's shape without the ``shared_axes`` (e.g. the training
        set's per-feature mean and standard deviation).
    shared_axes : 'auto', int or tuple of int

    Example
    -------
    >>> l_std = standardize((None, 3), np.zeros(3, "float32"), np.full(3, 2.0, "float32"), shared_axes=0)
    >>> l_std.get_output_for(pt.constant(np.full((1, 3), 4.0, "float32"))).eval().tolist()
    [[2.0, 2.0, 2.0]]
    """
    shifted = BiasLayer(layer, -offset, shared_axes)
    shifted.params[shifted.b].discard("trainable")
    scaled = ScaleLayer(shifted, floatX(1.0) / scale, shared_axes)
    scaled.params[scaled.scales].discard("trainable")
    return scaled


class InverseLayer(MergeLayer):
    """The gradient of ``layer``'s output with respect to its input, applied to ``incoming``'s output.

    For a :class:`~theanompi.nn.DenseLayer` without nonlinearity
    this is the product with ``W`` transposed; for a convolution, the
    transposed convolution; for a max-pooling layer, unpooling. Useful for
    autoencoders with tied weights.

    Parameters
    ----------
    incoming : Layer or tuple
        Feeds the inverse (typically of ``layer``'s output shape).
    layer : Layer
        The layer to invert; the output has the shape of its input.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> dense = DenseLayer(InputLayer((None, 12)), 3, nonlinearity=None)
    >>> InverseLayer(dense, dense).output_shape
    (None, 12)
    """

    def __init__(self, incoming, layer, **kwargs):
        super().__init__([incoming, layer, layer.input_layer], **kwargs)

    def get_output_shape_for(self, input_shapes):
        return input_shapes[2]

    def get_output_for(self, inputs, **kwargs):
        input, layer_out, layer_in = inputs
        return pytensor.grad(None, wrt=layer_in, known_grads={layer_out: input})


def _rectify(x, alpha):
    """``x`` where positive, ``alpha * x`` elsewhere."""
    return pt.switch(pt.gt(x, 0), x, alpha * x)


class ParametricRectifierLayer(Layer):
    """A rectifier with learned negative slopes (PReLU): ``max(x, 0) + alpha * min(x, 0)``.

    Parameters
    ----------
    incoming : Layer or tuple
    alpha : initializer, array or expression
        The slopes, of the input's shape without the ``shared_axes``.
    shared_axes : 'auto', 'all', int or tuple of int
        ``'auto'``: one slope per unit or channel (all axes but the second);
        ``'all'``: one scalar slope.

    Example
    -------
    >>> ParametricRectifierLayer((20, 3, 28, 28), shared_axes=(0, 3)).alpha.get_value().shape
    (3, 28)
    """

    def __init__(self, incoming, alpha=init.Constant(0.25), shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        self.shared_axes = shared_axes_tuple(shared_axes, len(self.input_shape), "ParametricRectifierLayer",
                                             allow_all=True)
        shape = _per_axis_shape(self.input_shape, self.shared_axes, "ParametricRectifierLayer", "alphas")
        self.alpha = self.add_param(alpha, shape, name="alpha", regularizable=False)

    def get_output_for(self, input, **kwargs):
        input = as_expression(input)
        return _rectify(input, _broadcast_over(self.alpha, self.shared_axes, input.ndim))


def _replace_nonlinearity(layer):
    """Make ``layer``'s nonlinearity (if it has one) the identity, so a rectifier layer can follow it."""
    if getattr(layer, "nonlinearity", None) is not None:
        layer.nonlinearity = nonlinearities.identity


def prelu(layer, **kwargs):
    """``layer`` with its nonlinearity replaced by a :class:`ParametricRectifierLayer` on top (modifies ``layer``).

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> dense = DenseLayer((None, 10), 5)
    >>> prelu(dense).output_shape, dense.nonlinearity is nonlinearities.identity
    ((None, 5), True)
    """
    _replace_nonlinearity(layer)
    return ParametricRectifierLayer(layer, **kwargs)


class RandomizedRectifierLayer(RandomDrawLayer):
    """A rectifier with random negative slopes while training (RReLU), their mean otherwise.

    Training (``deterministic=False``): ``max(x, a * x)`` with slopes ``a``
    drawn uniformly from ``[lower, upper)`` at every call, one per position
    outside ``shared_axes``. Inference: the slope ``(lower + upper) / 2``.

    Parameters
    ----------
    incoming : Layer or tuple
    lower, upper : float or expression
        The range of the slopes (``lower <= upper``).
    shared_axes : 'auto', 'all', int or tuple of int
        Axes sharing one slope; ``'auto'``: all but the second.

    Raises
    ------
    ValueError
        When ``lower > upper``.

    Example
    -------
    >>> layer = RandomizedRectifierLayer((None, 4), lower=0.2, upper=0.4)
    >>> x = pt.constant(-np.ones((2, 4), "float32"))
    >>> np.allclose(layer.get_output_for(x, deterministic=True).eval(), -0.3)
    True
    """

    def __init__(self, incoming, lower=0.3, upper=0.8, shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        if not isinstance(lower > upper, pytensor.graph.basic.Variable) and lower > upper:
            raise ValueError(f"RandomizedRectifierLayer: the upper bound must be >= the lower bound, got "
                             f"lower={lower!r}, upper={upper!r}")
        self.lower, self.upper = lower, upper
        self.shared_axes = shared_axes_tuple(shared_axes, len(self.input_shape), "RandomizedRectifierLayer",
                                             allow_all=True)

    def get_output_for(self, input, deterministic=False, **kwargs):
        input = as_expression(input)
        if deterministic or (not isinstance(self.upper == self.lower, pytensor.graph.basic.Variable)
                             and self.upper == self.lower):
            return _rectify(input, pt.cast((self.upper + self.lower) / 2.0, input.dtype))
        shape = tuple(1 if axis in self.shared_axes else input.shape[axis] for axis in range(input.ndim))
        slopes = self.draw_uniform(shape, self.lower, self.upper, input.dtype)
        slopes = pt.specify_broadcastable(slopes, *self.shared_axes) if self.shared_axes else slopes
        return _rectify(input, slopes)


def rrelu(layer, **kwargs):
    """``layer`` with its nonlinearity replaced by a :class:`RandomizedRectifierLayer` on top (modifies ``layer``).

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> rrelu(DenseLayer((None, 10), 5), lower=0.1).lower
    0.1
    """
    _replace_nonlinearity(layer)
    return RandomizedRectifierLayer(layer, **kwargs)
