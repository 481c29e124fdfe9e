"""The network's entry point: :class:`InputLayer`.

Example
-------
>>> from theanompi.nn import InputLayer
>>> l_in = InputLayer((None, 1, 28, 28))
>>> l_in.input_var.ndim, l_in.input_var.dtype == __import__("pytensor").config.floatX
(4, True)
"""

from __future__ import annotations

import numbers
from collections import OrderedDict

import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from theanompi.nn.layers.base import Layer

__all__ = ["InputLayer"]


class InputLayer(Layer):
    """Holds the symbolic input of a network.

    Parameters
    ----------
    shape : tuple of int or None
        The input's shape; ``None`` for dimensions unknown until run time
        (typically the batch size). Dimensions that layers use to size their
        parameters (features, channels) must be known.
    input_var : TensorVariable, optional
        The input expression; by default a new floatX tensor with
        ``len(shape)`` dimensions, broadcastable where ``shape`` says 1 (the
        other dimensions take any size).
    name : str, optional

    Raises
    ------
    ValueError
        When ``shape`` has an entry that is neither None nor a positive int, or
        ``input_var`` has a different number of dimensions.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> x = pt.matrix("x")
    >>> InputLayer((None, 64), input_var=x).input_var is x
    True
    """

    def __init__(self, shape, input_var=None, name=None, **kwargs):
        try:
            shape = tuple(shape)
        except TypeError:
            raise ValueError(f"InputLayer: shape must be a tuple of ints or None, got {shape!r}") from None
        if any(s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0)
               for s in shape):
            raise ValueError(f"InputLayer: shape entries must be positive ints or None, got {shape!r}")
        self.shape = tuple(None if s is None else int(s) for s in shape)
        ndim = len(self.shape)
        if input_var is None:
            # size-1 dimensions are broadcastable (as in Lasagne); the others take any size
            input_var = pt.tensor(name=f"{name}.input" if name else "input", dtype=pytensor.config.floatX,
                                  shape=tuple(1 if s == 1 else None for s in self.shape))
        elif not isinstance(input_var, Variable):
            raise ValueError(f"InputLayer: input_var must be a pytensor variable, got {type(input_var).__name__}")
        elif input_var.ndim != ndim:
            raise ValueError(f"InputLayer: shape {self.shape} has {ndim} dimensions but input_var "
                             f"{input_var} has {input_var.ndim}")
        self.input_var = input_var
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []

    @property
    def output_shape(self):
        return self.shape
