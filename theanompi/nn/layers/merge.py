"""Layers that merge several inputs: :class:`ElemwiseSumLayer`, :class:`ElemwiseMergeLayer`, :class:`ConcatLayer`.

With ``cropping``, inputs of different sizes are first cropped to a common one (:func:`autocrop`).

Example
-------
>>> from theanompi.nn import InputLayer, ElemwiseSumLayer, ConcatLayer
>>> a, b = InputLayer((None, 4)), InputLayer((None, 4))
>>> ElemwiseSumLayer([a, b], coeffs=[1, -1]).output_shape, ConcatLayer([a, b]).output_shape
((None, 4), (None, 8))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt

from theanompi.nn.layers.base import MergeLayer
from theanompi.nn.utils import as_expression

__all__ = ["ConcatLayer", "ElemwiseMergeLayer", "ElemwiseSumLayer", "autocrop", "autocrop_array_shapes", "concat"]

#: Per-axis cropping modes: keep the axis, or crop every input to the smallest size keeping its start, centre or end.
CROP_MODES = (None, "lower", "center", "upper")


def _crop_modes(cropping, ndims):
    """The mode of every axis (``cropping`` padded with None), or ValueError for a bad mode or mixed ranks."""
    modes = list(cropping)
    bad = [m for m in modes if m not in CROP_MODES]
    if bad:
        raise ValueError(f"cropping modes must be None, 'lower', 'center' or 'upper', got {bad[0]!r} in {cropping!r}")
    if len(set(ndims)) != 1:
        raise ValueError(f"cropping needs inputs with the same number of dimensions, got {list(ndims)}")
    ndim = next(iter(ndims))
    return modes[:ndim] + [None] * (ndim - len(modes))


def autocrop_array_shapes(input_shapes, cropping):
    """The shapes of ``input_shapes`` after :func:`autocrop` (an axis with an unknown size becomes unknown).

    Example
    -------
    >>> autocrop_array_shapes([(1, 2, 3, 4), (5, 6, 7, 8)], [None, "lower", "center"])
    [(1, 2, 3, 4), (5, 2, 3, 8)]
    """
    if cropping is None:
        return list(input_shapes)
    modes = _crop_modes(cropping, [len(shape) for shape in input_shapes])
    result = [list(shape) for shape in input_shapes]
    for axis, mode in enumerate(modes):
        if mode is not None:
            sizes = [shape[axis] for shape in input_shapes]
            smallest = None if None in sizes else min(sizes)
            for shape in result:
                shape[axis] = smallest
    return [tuple(shape) for shape in result]


def _crop_slice(size, smallest, mode):
    if mode == "lower":
        return slice(0, smallest)
    if mode == "upper":
        return slice(size - smallest, size)
    offset = (size - smallest) // 2
    return slice(offset, offset + smallest)


def autocrop(inputs, cropping):
    """``inputs`` cropped to the smallest size along the axes whose ``cropping`` mode is not None.

    ``cropping``: None (no cropping) or one mode per axis (missing trailing
    axes: None): ``'lower'`` keeps the first entries, ``'upper'`` the last,
    ``'center'`` the middle ones (the first of two middles).

    Example
    -------
    >>> import numpy as np
    >>> a, b = np.arange(5.0), np.arange(3.0)
    >>> [x.eval().tolist() for x in autocrop([a, b], ["center"])]
    [[1.0, 2.0, 3.0], [0.0, 1.0, 2.0]]
    """
    if cropping is None:
        return inputs
    inputs = [as_expression(x) for x in inputs]
    modes = _crop_modes(cropping, [x.ndim for x in inputs])
    index = [[slice(None)] * x.ndim for x in inputs]
    for axis, mode in enumerate(modes):
        if mode is None:
            continue
        smallest = inputs[0].shape[axis]
        for x in inputs[1:]:
            smallest = pt.minimum(smallest, x.shape[axis])
        for x, idx in zip(inputs, index):
            idx[axis] = _crop_slice(x.shape[axis], smallest, mode)
    return [x[tuple(idx)] for x, idx in zip(inputs, index)]


def _merged_sizes(input_shapes):
    """Per axis, the first known size of any input (None where none is known)."""
    return [next((s for s in sizes if s is not None), None) for sizes in zip(*input_shapes)]


def _agree(shape, reference, skip_axis=None):
    return len(shape) == len(reference) and all(
        axis == skip_axis or a is None or b is None or a == b for axis, (a, b) in enumerate(zip(shape, reference)))


class ElemwiseMergeLayer(MergeLayer):
    """Combines same-shaped inputs with a binary elementwise function (``merge_function(a, b)``).

    Parameters
    ----------
    incomings : sequence of Layer or tuple
    merge_function : callable
    cropping : None or sequence of modes
        Crop the inputs to a common shape first (see :func:`autocrop`).

    Raises
    ------
    ValueError
        (When the output shape is asked for) for shapes that differ after cropping.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> ElemwiseMergeLayer([(None, 3), (None, 3)], pt.maximum).output_shape
    (None, 3)
    """

    def __init__(self, incomings, merge_function, cropping=None, **kwargs):
        super().__init__(incomings, **kwargs)
        self.merge_function = merge_function
        self.cropping = cropping

    def get_output_shape_for(self, input_shapes):
        input_shapes = autocrop_array_shapes(input_shapes, self.cropping)
        out = _merged_sizes(input_shapes)
        if not all(_agree(shape, out) for shape in input_shapes):
            raise ValueError(f"{type(self).__name__}: input shapes must match, got {list(input_shapes)}")
        return tuple(out)

    def get_output_for(self, inputs, **kwargs):
        inputs = autocrop(inputs, self.cropping)
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
    cropping : None or sequence of modes
        See :func:`autocrop`.

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
        for coeff, x in zip(self.coeffs, autocrop(inputs, self.cropping)):
            term = x if coeff == 1 else x * np.asarray(coeff, dtype=x.dtype)
            output = term if output is None else output + term
        return output


class ConcatLayer(MergeLayer):
    """Concatenates inputs along ``axis``; the other dimensions must match.

    Parameters
    ----------
    incomings : sequence of Layer or tuple
    axis : int
    cropping : None or sequence of modes
        Crop the other axes to a common size first (see :func:`autocrop`; the
        concatenation axis is never cropped).

    Raises
    ------
    ValueError
        (When the output shape is asked for) for inputs of different ranks, an
        axis out of range, or sizes that differ outside ``axis``.

    Example
    -------
    >>> ConcatLayer([(None, 2, 5), (None, 3, 5)], axis=1).output_shape
    (None, 5, 5)
    """

    def __init__(self, incomings, axis=1, cropping=None, **kwargs):
        super().__init__(incomings, **kwargs)
        self.axis = axis
        if cropping is not None:
            cropping = list(cropping)
            cropping[axis] = None
        self.cropping = cropping

    def get_output_shape_for(self, input_shapes):
        input_shapes = autocrop_array_shapes(input_shapes, self.cropping)
        ranks = {len(s) for s in input_shapes}
        if len(ranks) != 1:
            raise ValueError(f"ConcatLayer: inputs must have the same number of dimensions, got {list(input_shapes)}")
        ndim = ranks.pop()
        if not -ndim <= self.axis < ndim:
            raise ValueError(f"ConcatLayer: axis={self.axis} out of range for input shapes {list(input_shapes)}")
        axis = self.axis % ndim
        out = _merged_sizes(input_shapes)
        if not all(_agree(shape, out, skip_axis=axis) for shape in input_shapes):
            raise ValueError(f"ConcatLayer: input shapes {list(input_shapes)} differ outside axis {self.axis}")
        sizes = [shape[axis] for shape in input_shapes]
        out[axis] = None if None in sizes else sum(sizes)
        return tuple(out)

    def get_output_for(self, inputs, **kwargs):
        return pt.concatenate(autocrop(inputs, self.cropping), axis=self.axis)


concat = ConcatLayer
