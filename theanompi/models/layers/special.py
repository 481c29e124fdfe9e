"""Layers defined by a function: :class:`ExpressionLayer` (Lasagne's ``lasagne.layers.special``).

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.models.layers import InputLayer, ExpressionLayer
>>> ExpressionLayer(InputLayer((None, 3, 4)), lambda x: x.mean(axis=2), output_shape="auto").output_shape
(None, 3)
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.models.layers.base import Layer

__all__ = ["ExpressionLayer"]


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
