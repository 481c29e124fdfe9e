"""Word embeddings (Lasagne's ``lasagne.layers.embedding``): :class:`EmbeddingLayer`.

Example
-------
>>> from theanompi.nn import InputLayer
>>> EmbeddingLayer(InputLayer((None, 7)), input_size=100, output_size=16).output_shape
(None, 7, 16)
"""

from __future__ import annotations

import numbers

from theanompi.nn import init
from theanompi.nn.layers.base import Layer

__all__ = ["EmbeddingLayer"]


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"EmbeddingLayer: {name} must be a positive int, got {value!r}")
    return int(value)


class EmbeddingLayer(Layer):
    """Looks integer indices up in a learned table: ``output[..., :] = W[input[...]]``.

    Parameters
    ----------
    incoming : Layer or tuple
        Integer indices in ``[0, input_size)``, of any shape (give the
        InputLayer an integer ``input_var``, e.g. ``pt.imatrix()``).
    input_size : int
        The number of rows of the table (the vocabulary's size).
    output_size : int
        The length of each embedding vector.
    W : initializer, array or shared variable
        The table, (input_size, output_size).

    Example
    -------
    >>> import numpy as np, pytensor.tensor as pt
    >>> layer = EmbeddingLayer((None,), 3, 2, W=np.arange(6, dtype="float32").reshape(3, 2))
    >>> layer.get_output_for(pt.as_tensor_variable(np.array([2, 0]))).eval().tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """

    def __init__(self, incoming, input_size, output_size, W=init.Normal(), **kwargs):
        super().__init__(incoming, **kwargs)
        self.input_size = _positive_int(input_size, "input_size")
        self.output_size = _positive_int(output_size, "output_size")
        self.W = self.add_param(W, (self.input_size, self.output_size), name="W")

    def get_output_shape_for(self, input_shape):
        return (*input_shape, self.output_size)

    def get_output_for(self, input, **kwargs):
        return self.W[input]
