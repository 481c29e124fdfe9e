"""Layers that merge several inputs: :class:`ElemwiseSumLayer`, :class:`ElemwiseMergeLayer`, :class:`ConcatLayer`.

Example
-------
>>> from theanompi.models.layers import InputLayer, ElemwiseSumLayer, ConcatLayer
>>> a, b = InputLayer((None, 4)), InputLayer((None, 4))
>>> ElemwiseSumLayer([a, b], coeffs=[1, -1]).output_shape, ConcatLayer([a, b]).output_shape
((None, 4), (None, 8))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt

from theanompi.models.layers.base import MergeLayer

__all__ = ["ConcatLayer", "ElemwiseMergeLayer", "ElemwiseSumLayer", "concat"]


class ElemwiseMergeLayer(MergeLayer):
    """Combines same-shaped inputs with a binary elementwise function (``merge_function(a, b)``).

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> ElemwiseMergeLayer([(None, 3), (None, 3)], pt.maximum).output_shape
    (None, 3)
    """

    def __init__(self, incomings, merge_function, cropping=None, **kwargs):
        super().__init__(incomings, **kwargs)
        if cropping is not None:
            raise ValueError(f"{type(self).__name__}: cropping={cropping!r} is not supported (use None)")
        self.merge_function = merge_function
        _ = self.output_shape  # validates now

    def get_output_shape_for(self, input_shapes):
        ranks = {len(s) for s in input_shapes}
        out = tuple(next((s for s in sizes if s is not None), None) for sizes in zip(*input_shapes))
        if len(ranks) != 1 or not all(all(a is None or b is None or a == b for a, b in zip(s, out))
                                      for s in input_shapes):
            raise ValueError(f"{type(self).__name__}: input shapes must match, got {list(input_shapes)}")
        return out

    def get_output_for(self, inputs, **kwargs):
        output = inputs[0]
        for x in inputs[1:]:
            output = self.merge_function(output, x)
        return output


class ElemwiseSumLayer(ElemwiseMergeLayer):
    """``sum_i coeffs[i] * inputs[i]`` of same-shaped inputs (residual connections).

    Parameters
    ----------
    incomings : sequence of Layer or tuple
    coeffs : number or sequence of numbers
        One coefficient for all inputs, or one per input.

    Example
    -------
    >>> ElemwiseSumLayer([(None, 2), (None, 2)], coeffs=0.5).coeffs
    [0.5, 0.5]
    """

    def __init__(self, incomings, coeffs=1, cropping=None, **kwargs):
        super().__init__(incomings, pt.add, cropping=cropping, **kwargs)
        n = len(self.input_shapes)
        if isinstance(coeffs, numbers.Real) and not isinstance(coeffs, bool):
            coeffs = [coeffs] * n
        else:
            try:
                coeffs = list(coeffs)
            except TypeError:
                raise ValueError(f"ElemwiseSumLayer: coeffs must be a number or a list, got {coeffs!r}") from None
            if len(coeffs) != n:
                raise ValueError(f"ElemwiseSumLayer: got {len(coeffs)} coeffs {coeffs!r} for {n} incomings")
        self.coeffs = coeffs

    def get_output_for(self, inputs, **kwargs):
        output = None
        for coeff, x in zip(self.coeffs, inputs):
            term = x if coeff == 1 else x * np.asarray(coeff, dtype=x.dtype)
            output = term if output is None else output + term
        return output


class ConcatLayer(MergeLayer):
    """Concatenates inputs along ``axis``; the other dimensions must match.

    Example
    -------
    >>> ConcatLayer([(None, 2, 5), (None, 3, 5)], axis=1).output_shape
    (None, 5, 5)
    """

    def __init__(self, incomings, axis=1, cropping=None, **kwargs):
        super().__init__(incomings, **kwargs)
        if cropping is not None:
            raise ValueError(f"ConcatLayer: cropping={cropping!r} is not supported (use None)")
        self.axis = axis
        _ = self.output_shape  # validates now

    def get_output_shape_for(self, input_shapes):
        ranks = {len(s) for s in input_shapes}
        if len(ranks) != 1:
            raise ValueError(f"ConcatLayer: inputs must have the same number of dimensions, got {list(input_shapes)}")
        ndim = ranks.pop()
        if not -ndim <= self.axis < ndim:
            raise ValueError(f"ConcatLayer: axis={self.axis} out of range for input shapes {list(input_shapes)}")
        axis = self.axis % ndim
        out = []
        for dim, sizes in enumerate(zip(*input_shapes)):
            if dim == axis:
                out.append(None if any(s is None for s in sizes) else sum(sizes))
            else:
                known = {s for s in sizes if s is not None}
                if len(known) > 1:
                    raise ValueError(f"ConcatLayer: input shapes {list(input_shapes)} differ outside axis {self.axis}")
                out.append(known.pop() if known else None)
        return tuple(out)

    def get_output_for(self, inputs, **kwargs):
        return pt.concatenate(inputs, axis=self.axis)


concat = ConcatLayer
