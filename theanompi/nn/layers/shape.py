"""Shape-changing layers: :class:`FlattenLayer`, :class:`ReshapeLayer`, :class:`DimshuffleLayer`, :class:`PadLayer`.

Example
-------
>>> from theanompi.nn import InputLayer, FlattenLayer, ReshapeLayer
>>> l_in = InputLayer((None, 3, 4, 5))
>>> FlattenLayer(l_in).output_shape, ReshapeLayer(l_in, ([0], -1, 5)).output_shape
((None, 60), (None, 12, 5))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from theanompi.nn.layers.base import Layer

__all__ = [
    "DimshuffleLayer", "FlattenLayer", "PadLayer", "ReshapeLayer", "SliceLayer", "dimshuffle", "flatten", "pad",
    "pad_tensor", "reshape",
]


class FlattenLayer(Layer):
    """Flattens the trailing dimensions so that the output has ``outdim`` dimensions.

    Parameters
    ----------
    incoming : Layer or tuple
    outdim : int
        Dimensions of the output, 1 <= outdim <= input dimensions; the first
        ``outdim - 1`` dimensions are kept.

    Raises
    ------
    ValueError
        For an ``outdim`` below 1, or above the input's dimensions (when the
        output shape or expression is asked for).

    Example
    -------
    >>> FlattenLayer((None, 2, 3, 4), outdim=3).output_shape
    (None, 2, 12)
    """

    def __init__(self, incoming, outdim=2, **kwargs):
        super().__init__(incoming, **kwargs)
        if isinstance(outdim, bool) or not isinstance(outdim, numbers.Integral) or outdim < 1:
            raise ValueError(f"FlattenLayer: outdim must be an int >= 1, got {outdim!r}")
        self.outdim = int(outdim)

    def _check_ndim(self, ndim):
        if self.outdim > ndim:
            raise ValueError(f"FlattenLayer: outdim={self.outdim} is more than the input's {ndim} dimensions")

    def get_output_shape_for(self, input_shape):
        self._check_ndim(len(input_shape))
        rest = input_shape[self.outdim - 1:]
        flat = None if any(s is None for s in rest) else int(np.prod(rest))
        return tuple(input_shape[: self.outdim - 1]) + (flat,)

    def get_output_for(self, input, **kwargs):
        self._check_ndim(input.ndim)
        return input.flatten(self.outdim)


flatten = FlattenLayer


class ReshapeLayer(Layer):
    """Reshapes its input to ``shape`` (Lasagne's specification).

    Parameters
    ----------
    incoming : Layer or tuple
    shape : tuple
        Entries: a positive int; ``-1`` (at most once: inferred from the total
        size); ``[i]``, the size of input dimension ``i`` (e.g. ``[0]`` keeps the
        batch size, even when unknown); or a scalar pytensor expression.

    Raises
    ------
    ValueError
        For an invalid entry, two -1 entries, a reference to a missing input
        dimension, or a total size that cannot match.

    Example
    -------
    >>> ReshapeLayer((None, 6, 4), ([0], 2, [2], -1)).output_shape
    (None, 2, 4, 3)
    """

    def __init__(self, incoming, shape, **kwargs):
        super().__init__(incoming, **kwargs)
        try:
            shape = tuple(shape)
        except TypeError:
            raise ValueError(f"ReshapeLayer: shape must be a tuple, got {shape!r}") from None
        for s in shape:
            if isinstance(s, numbers.Integral) and not isinstance(s, bool):
                if s == 0 or s < -1:
                    raise ValueError(f"ReshapeLayer: integer entries of shape must be positive or -1, got {shape!r}")
            elif isinstance(s, list):
                if len(s) != 1 or not isinstance(s[0], numbers.Integral) or s[0] < 0:
                    raise ValueError(f"ReshapeLayer: input references must be single-element lists of an int "
                                     f">= 0, got {s!r} in {shape!r}")
            elif isinstance(s, Variable):
                if s.ndim != 0:
                    raise ValueError(f"ReshapeLayer: symbolic entries must be scalars, got {s!r} with ndim={s.ndim}")
            else:
                raise ValueError(f"ReshapeLayer: shape entries must be ints, [i] references or scalar expressions, "
                                 f"got {s!r} in {shape!r}")
        if sum(1 for s in shape if isinstance(s, numbers.Integral) and s == -1) > 1:
            raise ValueError(f"ReshapeLayer: shape may contain -1 at most once, got {shape!r}")
        self.shape = shape
        _ = self.output_shape  # validates the sizes now rather than at the first use

    def get_output_shape_for(self, input_shape):
        output_shape = list(self.shape)
        input_shape = [None if isinstance(s, Variable) else s for s in input_shape]  # symbolic sizes: unknown
        masked_in = list(input_shape)
        masked_out = list(output_shape)
        for dim, o in enumerate(output_shape):
            if isinstance(o, list):
                if o[0] >= len(input_shape):
                    raise ValueError(f"ReshapeLayer: shape {self.shape!r} refers to input dimension [{o[0]}] but the "
                                     f"input shape {tuple(input_shape)} has {len(input_shape)} dimensions")
                output_shape[dim] = masked_out[dim] = input_shape[o[0]]
                if input_shape[o[0]] is None and masked_in[o[0]] is None:
                    masked_in[o[0]] = 1
                    masked_out[dim] = 1
        for dim, o in enumerate(output_shape):
            if isinstance(o, Variable):
                output_shape[dim] = masked_out[dim] = None
        in_size = None if any(s is None for s in masked_in) else int(np.prod(masked_in))
        out_size = None if any(s is None for s in masked_out) else int(np.prod(masked_out))
        if -1 in [o for o in output_shape if isinstance(o, numbers.Integral)]:
            dim = next(i for i, o in enumerate(output_shape) if isinstance(o, numbers.Integral) and o == -1)
            if in_size is None or out_size is None:
                output_shape[dim] = None
                out_size = None
            else:
                known = -out_size
                if in_size % known:
                    raise ValueError(f"ReshapeLayer: input shape {tuple(input_shape)} cannot be reshaped to "
                                     f"{self.shape!r}: the total sizes do not match ({in_size} is not a multiple "
                                     f"of {known})")
                output_shape[dim] = in_size // known
                out_size = in_size
        if in_size is not None and out_size is not None and in_size != out_size:
            raise ValueError(f"ReshapeLayer: input shape {tuple(input_shape)} cannot be reshaped to {self.shape!r}: "
                             f"the total sizes do not match ({in_size} != {out_size})")
        return tuple(output_shape)

    def get_output_for(self, input, **kwargs):
        shape = [input.shape[o[0]] if isinstance(o, list) else o for o in self.shape]
        return input.reshape(tuple(shape), ndim=len(shape))


reshape = ReshapeLayer


class DimshuffleLayer(Layer):
    """Permutes dimensions and inserts broadcastable ones (``'x'``), like ``tensor.dimshuffle``.

    Example
    -------
    >>> DimshuffleLayer((None, 3, 5), (0, 2, "x", 1)).output_shape
    (None, 5, 1, 3)
    """

    def __init__(self, incoming, pattern, **kwargs):
        super().__init__(incoming, **kwargs)
        pattern = tuple(pattern)
        ndim = len(self.input_shape)
        used = [p for p in pattern if p != "x"]
        if any(not isinstance(p, numbers.Integral) or not 0 <= p < ndim for p in used) or len(set(used)) != len(used):
            raise ValueError(f"DimshuffleLayer: pattern {pattern!r} is invalid for input shape {self.input_shape}")
        dropped = set(range(ndim)) - set(used)
        if any(self.input_shape[d] not in (1, None) for d in dropped):
            raise ValueError(f"DimshuffleLayer: pattern {pattern!r} drops a dimension of size != 1 in input shape "
                             f"{self.input_shape}")
        self.pattern = pattern

    def get_output_shape_for(self, input_shape):
        return tuple(1 if p == "x" else input_shape[p] for p in self.pattern)

    def get_output_for(self, input, **kwargs):
        return input.dimshuffle(self.pattern)


dimshuffle = DimshuffleLayer


class SliceLayer(Layer):
    """Slices the input along one axis: an int index drops the axis, a ``slice`` keeps it.

    Parameters
    ----------
    incoming : Layer or tuple
    indices : int or slice
    axis : int
        Negative values count from the end.

    Raises
    ------
    ValueError
        For ``indices`` of another kind.

    Example
    -------
    >>> SliceLayer((None, 5, 2), indices=slice(3, 5), axis=1).output_shape, SliceLayer((None, 5, 2), 0).output_shape
    ((None, 2, 2), (None, 5))
    """

    def __init__(self, incoming, indices, axis=-1, **kwargs):
        super().__init__(incoming, **kwargs)
        is_int = isinstance(indices, numbers.Integral) and not isinstance(indices, bool)
        if not (is_int or isinstance(indices, slice)):
            raise ValueError(f"SliceLayer: indices must be an int or a slice, got {indices!r}")
        self.slice = indices
        self.axis = axis

    def get_output_shape_for(self, input_shape):
        shape = list(input_shape)
        if isinstance(self.slice, slice):
            if shape[self.axis] is not None:
                shape[self.axis] = len(range(*self.slice.indices(shape[self.axis])))
        else:
            del shape[self.axis]
        return tuple(shape)

    def get_output_for(self, input, **kwargs):
        axis = self.axis % input.ndim
        return input[(slice(None),) * axis + (self.slice,)]


def _is_count(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0


def _pad_spec(width):
    """``width`` as an int (every padded axis) or a list of (before, after) pairs (one per axis); None if malformed."""
    if _is_count(width):
        return int(width)
    try:
        entries = list(width)
    except TypeError:
        return None
    pairs = []
    for entry in entries:
        if _is_count(entry):
            pairs.append((int(entry), int(entry)))
        elif isinstance(entry, (tuple, list)) and len(entry) == 2 and all(_is_count(v) for v in entry):
            pairs.append((int(entry[0]), int(entry[1])))
        else:
            return None
    return pairs


def _axis_widths(spec, ndim, batch_ndim, who):
    """``{axis: (before, after)}`` of an ``ndim``-dimensional tensor: a :func:`_pad_spec` after ``batch_ndim`` axes."""
    if batch_ndim > ndim:
        raise ValueError(f"{who}: batch_ndim={batch_ndim} is more than the input's {ndim} dimensions")
    if isinstance(spec, int):
        return {axis: (spec, spec) for axis in range(batch_ndim, ndim)}
    if len(spec) > ndim - batch_ndim:
        raise ValueError(f"{who}: {len(spec)} widths given for the {ndim - batch_ndim} axes after the first "
                         f"{batch_ndim} of a {ndim}-dimensional input")
    return {batch_ndim + k: pair for k, pair in enumerate(spec)}


def _check_pad_args(width, batch_ndim, who):
    """The :func:`_pad_spec` of ``width``, or ValueError for a malformed ``width`` or ``batch_ndim``."""
    if isinstance(batch_ndim, bool) or not isinstance(batch_ndim, numbers.Integral) or batch_ndim < 0:
        raise ValueError(f"{who}: batch_ndim must be an int >= 0, got {batch_ndim!r}")
    spec = _pad_spec(width)
    if spec is None:
        raise ValueError(f"{who}: width must be an int >= 0 or a sequence with, per padded axis, an int >= 0 or a "
                         f"(before, after) pair; got {width!r}")
    return spec


def pad_tensor(x, width, val=0, batch_ndim=1):
    """``x`` padded with the constant ``val`` on the axes after the first ``batch_ndim``.

    ``width``: an int pads every such axis by that much on both sides; a
    sequence gives, for the first ``len(width)`` such axes, an int (both
    sides) or a ``(before, after)`` pair. (Lasagne's
    ``lasagne.theano_extensions.padding.pad``.)

    Example
    -------
    >>> pad_tensor(pt.as_tensor_variable(np.ones((1, 2), "float32")), [(1, 0)], val=7).eval().tolist()
    [[7.0, 1.0, 1.0]]
    """
    x = pt.as_tensor_variable(x)
    widths = _axis_widths(_check_pad_args(width, batch_ndim, "pad"), x.ndim, int(batch_ndim), "pad")
    shape, region = [], []
    for axis in range(x.ndim):
        before, after = widths.get(axis, (0, 0))
        shape.append(x.shape[axis] + before + after)
        region.append(slice(before, before + x.shape[axis]))
    filled = pt.alloc(np.asarray(val, dtype=x.dtype), *shape)
    return pt.set_subtensor(filled[tuple(region)], x)


class PadLayer(Layer):
    """Pads the trailing axes (all but the first ``batch_ndim``) with the constant ``val`` (see :func:`pad_tensor`).

    Parameters
    ----------
    incoming : Layer or tuple
    width : int or sequence
        An int pads every trailing axis by that much on both sides; a
        sequence gives, per trailing axis (from the first), an int (both
        sides) or a ``(before, after)`` pair. Entries are ints >= 0.
    val : float
        The padding value.
    batch_ndim : int
        Leading axes left unpadded (2: batch and channels).

    Raises
    ------
    ValueError
        For a ``width`` of another form, or (when the output shape or
        expression is asked for) more widths or a larger ``batch_ndim`` than
        the input has axes.

    Example
    -------
    >>> PadLayer((None, 3, 4, 5), width=[1, (0, 2)]).output_shape
    (None, 3, 6, 7)
    """

    def __init__(self, incoming, width, val=0, batch_ndim=2, **kwargs):
        super().__init__(incoming, **kwargs)
        self.width = _check_pad_args(width, batch_ndim, "PadLayer")
        self.batch_ndim = int(batch_ndim)
        self.val = val

    def get_output_shape_for(self, input_shape):
        widths = _axis_widths(self.width, len(input_shape), self.batch_ndim, "PadLayer")
        return tuple(None if s is None else s + sum(widths.get(axis, (0, 0))) for axis, s in enumerate(input_shape))

    def get_output_for(self, input, **kwargs):
        return pad_tensor(input, self.width, self.val, self.batch_ndim)


pad = PadLayer
