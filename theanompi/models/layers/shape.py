"""Shape-changing layers: :class:`FlattenLayer`, :class:`ReshapeLayer`, :class:`DimshuffleLayer`, :class:`PadLayer`.

Example
-------
>>> from theanompi.models.layers import InputLayer, FlattenLayer, ReshapeLayer
>>> l_in = InputLayer((None, 3, 4, 5))
>>> FlattenLayer(l_in).output_shape, ReshapeLayer(l_in, ([0], -1, 5)).output_shape
((None, 60), (None, 12, 5))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from theanompi.models.layers.base import Layer

__all__ = ["DimshuffleLayer", "FlattenLayer", "PadLayer", "ReshapeLayer", "dimshuffle", "flatten", "pad", "reshape"]


class FlattenLayer(Layer):
    """Flattens the trailing dimensions so that the output has ``outdim`` dimensions.

    Parameters
    ----------
    incoming : Layer or tuple
    outdim : int
        Dimensions of the output, 1 <= outdim <= input dimensions; the first
        ``outdim - 1`` dimensions are kept.

    Example
    -------
    >>> FlattenLayer((None, 2, 3, 4), outdim=3).output_shape
    (None, 2, 12)
    """

    def __init__(self, incoming, outdim=2, **kwargs):
        super().__init__(incoming, **kwargs)
        if isinstance(outdim, bool) or not isinstance(outdim, numbers.Integral) or not 1 <= outdim <= len(
                self.input_shape):
            raise ValueError(f"FlattenLayer: outdim must be an int in 1..{len(self.input_shape)} for input shape "
                             f"{self.input_shape}, got {outdim!r}")
        self.outdim = int(outdim)

    def get_output_shape_for(self, input_shape):
        rest = input_shape[self.outdim - 1:]
        flat = None if any(s is None for s in rest) else int(np.prod(rest))
        return tuple(input_shape[: self.outdim - 1]) + (flat,)

    def get_output_for(self, input, **kwargs):
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
        masked_in = list(input_shape)
        masked_out = list(output_shape)
        for dim, o in enumerate(output_shape):
            if isinstance(o, list):
                if o[0] >= len(input_shape):
                    raise ValueError(f"ReshapeLayer: shape {self.shape!r} refers to input dimension [{o[0]}] but the "
                                     f"input shape {input_shape} has {len(input_shape)} dimensions")
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
                    raise ValueError(f"ReshapeLayer: input shape {input_shape} cannot be reshaped to {self.shape!r}: "
                                     f"total size {in_size} is not a multiple of {known}")
                output_shape[dim] = in_size // known
                out_size = in_size
        if in_size is not None and out_size is not None and in_size != out_size:
            raise ValueError(f"ReshapeLayer: input shape {input_shape} cannot be reshaped to {self.shape!r}: total "
                             f"size {in_size} != {out_size}")
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


def _pad_widths(width, n_axes):
    """``width`` (int, or per axis an int or a (before, after) pair) as n_axes (before, after) int pairs."""
    def is_count(v):
        return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0

    if is_count(width):
        return [(int(width), int(width))] * n_axes
    try:
        entries = list(width)
    except TypeError:
        entries = None
    if entries is None or len(entries) != n_axes:
        return None
    pairs = []
    for entry in entries:
        if is_count(entry):
            pairs.append((int(entry), int(entry)))
        elif isinstance(entry, (tuple, list)) and len(entry) == 2 and all(is_count(v) for v in entry):
            pairs.append((int(entry[0]), int(entry[1])))
        else:
            return None
    return pairs


class PadLayer(Layer):
    """Pads the trailing axes (all but the first ``batch_ndim``) with the constant ``val``.

    Parameters
    ----------
    incoming : Layer or tuple
    width : int or sequence
        An int pads every trailing axis by that much on both sides; a
        sequence gives, per trailing axis, an int (both sides) or a
        ``(before, after)`` pair. Entries are ints >= 0.
    val : float
        The padding value.
    batch_ndim : int
        Leading axes left unpadded (2: batch and channels).

    Raises
    ------
    ValueError
        For a ``width`` of another form or length, or ``batch_ndim`` outside
        0..ndim.

    Example
    -------
    >>> PadLayer((None, 3, 4, 5), width=[1, (0, 2)]).output_shape
    (None, 3, 6, 7)
    """

    def __init__(self, incoming, width, val=0, batch_ndim=2, **kwargs):
        super().__init__(incoming, **kwargs)
        ndim = len(self.input_shape)
        if isinstance(batch_ndim, bool) or not isinstance(batch_ndim, numbers.Integral) or not 0 <= batch_ndim <= ndim:
            raise ValueError(f"PadLayer: batch_ndim must be an int in 0..{ndim} for input shape {self.input_shape}, "
                             f"got {batch_ndim!r}")
        self.batch_ndim = int(batch_ndim)
        widths = _pad_widths(width, ndim - self.batch_ndim)
        if widths is None:
            raise ValueError(f"PadLayer: width must be an int >= 0 or {ndim - self.batch_ndim} entries (ints >= 0 or "
                             f"(before, after) pairs), one per padded axis of input shape {self.input_shape}; "
                             f"got {width!r}")
        self.width = widths
        self.val = val

    def get_output_shape_for(self, input_shape):
        head = tuple(input_shape[: self.batch_ndim])
        return head + tuple(None if s is None else s + before + after
                            for s, (before, after) in zip(input_shape[self.batch_ndim:], self.width))

    def get_output_for(self, input, **kwargs):
        shape, region = [], []
        for axis in range(input.ndim):
            if axis < self.batch_ndim:
                shape.append(input.shape[axis])
                region.append(slice(None))
            else:
                before, after = self.width[axis - self.batch_ndim]
                shape.append(input.shape[axis] + before + after)
                region.append(slice(before, before + input.shape[axis]))
        filled = pt.alloc(np.asarray(self.val, dtype=input.dtype), *shape)
        return pt.set_subtensor(filled[tuple(region)], input)


pad = PadLayer
