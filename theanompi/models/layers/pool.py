"""Pooling layers on :func:`theanompi.backend.ops.max_pool2d` / ``avg_pool2d``.

``ignore_border=True`` (the default): the output length is
``(size + 2*pad - pool_size) // stride + 1`` and ``pad`` may be at most half
the window. ``ignore_border=False`` (Lasagne/Theano, ``pad`` 0 only) also keeps
the partial windows at the bottom/right border (a ceil-like length, see
:func:`pool_output_length`). Modes: ``'max'``; ``'average_inc_pad'`` divides by
the window size, padded zeros included; ``'average_exc_pad'`` divides by the
number of input entries in the window. A partial border window of
``ignore_border=False`` averages over its input entries in both average modes
(as Theano does).

Example
-------
>>> from theanompi.models.layers import InputLayer, MaxPool2DLayer, GlobalPoolLayer
>>> l = MaxPool2DLayer(InputLayer((None, 8, 32, 32)), pool_size=2)
>>> l.output_shape, GlobalPoolLayer(l).output_shape
((None, 8, 16, 16), (None, 8))
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from theanompi.backend.ops import avg_pool2d, max_pool2d
from theanompi.models.layers.base import Layer
from theanompi.models.layers.conv import _int_pair

__all__ = ["GlobalPoolLayer", "MaxPool2DLayer", "Pool2DLayer", "pool_output_length"]

MODES = ("max", "average_inc_pad", "average_exc_pad")


def pool_output_length(input_length, pool_size, stride, pad, ignore_border=True):
    """Output length of a pooling along one axis (None if ``input_length`` is None).

    ``ignore_border=True``: whole windows only, ``(n + 2*pad - pool) // stride + 1``.
    ``ignore_border=False`` (``pad`` 0): windows start every ``stride`` entries
    until one reaches the last entry, so partial windows at the end count.

    Example
    -------
    >>> pool_output_length(7, 2, 2, 0), pool_output_length(7, 3, 2, 1), pool_output_length(7, 2, 2, 0, False)
    (3, 4, 4)
    """
    if input_length is None:
        return None
    if ignore_border:
        return (input_length + 2 * pad - pool_size) // stride + 1
    if stride >= pool_size:
        return (input_length + stride - 1) // stride
    return max(0, (input_length - pool_size + stride - 1) // stride) + 1


def _border_extension(length, pool_size, stride):
    """Entries to append so that whole-window pooling gives ``ignore_border=False``'s length (ints or symbolic)."""
    if stride >= pool_size:
        n_out = (length + stride - 1) // stride
    else:
        n_out = pt.maximum(0, (length - pool_size + stride - 1) // stride) + 1
    needed = (n_out - 1) * stride + pool_size - length
    return pt.maximum(needed, 0)


def _extend(x, extension, fill):
    """``x`` with ``extension`` (rows, cols) entries of ``fill`` appended at the bottom/right."""
    rows, cols = x.shape[2], x.shape[3]
    filled = pt.alloc(np.asarray(fill, dtype=x.dtype), x.shape[0], x.shape[1], rows + extension[0],
                      cols + extension[1])
    return pt.set_subtensor(filled[:, :, :rows, :cols], x)


class Pool2DLayer(Layer):
    """2-D pooling over the last two axes of a 4-D (N, C, H, W) input.

    Parameters
    ----------
    incoming : Layer or tuple
    pool_size : int or (int, int)
    stride : int, (int, int) or None
        None: equal to ``pool_size`` (non-overlapping windows).
    pad : int or (int, int)
        Per side, at most ``pool_size // 2``; max pooling pads with -inf.
    ignore_border : bool
        True: whole windows only. False (needs ``pad`` 0): partial windows at
        the bottom/right border count too (Lasagne's and Theano's meaning).
    mode : {'max', 'average_inc_pad', 'average_exc_pad'}

    Raises
    ------
    ValueError
        For a non-4-D input, an unknown mode, too much padding (or any with
        ``ignore_border=False``), or a window larger than the padded input.

    Example
    -------
    >>> Pool2DLayer((None, 3, 9, 9), 3, stride=2, pad=1, mode="average_inc_pad").output_shape
    (None, 3, 5, 5)
    """

    def __init__(self, incoming, pool_size, stride=None, pad=(0, 0), ignore_border=True, mode="max", **kwargs):
        super().__init__(incoming, **kwargs)
        cls = type(self).__name__
        if len(self.input_shape) != 4:
            raise ValueError(f"{cls}: input must be 4-D (batch, channels, rows, cols), got shape {self.input_shape}")
        if mode not in MODES:
            raise ValueError(f"{cls}: mode={mode!r} is not supported; use one of {', '.join(MODES)}")
        self.mode = mode
        self.ignore_border = bool(ignore_border)
        self.pool_size = _int_pair(pool_size, f"{cls}: pool_size", 1)
        self.stride = self.pool_size if stride is None else _int_pair(stride, f"{cls}: stride", 1)
        self.pad = _int_pair(pad, f"{cls}: pad", 0)
        if not self.ignore_border and self.pad != (0, 0):
            raise ValueError(f"{cls}: ignore_border=False needs pad=0 (as in Lasagne), got pad={pad!r}")
        for p, k in zip(self.pad, self.pool_size):
            if 2 * p > k:
                raise ValueError(f"{cls}: pad must be at most half of pool_size, got pad={self.pad} with "
                                 f"pool_size={self.pool_size}")
        for axis in (2, 3):
            size, k, p = self.input_shape[axis], self.pool_size[axis - 2], self.pad[axis - 2]
            if size is not None and size + 2 * p < k and self.ignore_border:
                raise ValueError(f"{cls}: pool size {k} is larger than the padded input {size} + 2*{p} "
                                 f"(input shape {self.input_shape})")

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2]) + tuple(
            pool_output_length(input_shape[axis], self.pool_size[axis - 2], self.stride[axis - 2],
                               self.pad[axis - 2], self.ignore_border)
            for axis in (2, 3)
        )

    def get_output_for(self, input, **kwargs):
        window = dict(pool_size=self.pool_size, stride=self.stride, pad=self.pad)
        partial = not self.ignore_border
        if partial:
            extension = [_border_extension(input.shape[axis], self.pool_size[axis - 2], self.stride[axis - 2])
                         for axis in (2, 3)]
        if self.mode == "max":
            if partial:
                input = _extend(input, extension, np.finfo(input.dtype).min)
            return max_pool2d(input, **window)
        if self.mode == "average_inc_pad" and not partial:
            return avg_pool2d(input, **window)
        # Average over the input entries of each window: pooled sums over pooled counts (a mask of ones).
        ones = pt.ones((1, 1, input.shape[2], input.shape[3]), dtype=input.dtype)
        if partial:
            input, ones = _extend(input, extension, 0), _extend(ones, extension, 0)
        return avg_pool2d(input, **window) / avg_pool2d(ones, **window)


class MaxPool2DLayer(Pool2DLayer):
    """2-D max pooling (:class:`Pool2DLayer` with ``mode='max'``).

    Example
    -------
    >>> MaxPool2DLayer((None, 3, 8, 8), pool_size=(2, 2)).output_shape
    (None, 3, 4, 4)
    """

    def __init__(self, incoming, pool_size, stride=None, pad=(0, 0), ignore_border=True, **kwargs):
        super().__init__(incoming, pool_size, stride=stride, pad=pad, ignore_border=ignore_border,
                         mode="max", **kwargs)


class GlobalPoolLayer(Layer):
    """Pools each channel over all trailing axes: (N, C, ...) -> (N, C).

    Parameters
    ----------
    incoming : Layer or tuple
        At least 3-D.
    pool_function : callable
        ``f(tensor, axis=2)``, e.g. ``pt.mean`` (default), ``pt.max``, ``pt.sum``.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> GlobalPoolLayer((None, 16, 4, 4), pool_function=pt.max).output_shape
    (None, 16)
    """

    def __init__(self, incoming, pool_function=pt.mean, **kwargs):
        super().__init__(incoming, **kwargs)
        if len(self.input_shape) < 3:
            raise ValueError(f"GlobalPoolLayer: input must have at least 3 dimensions, got shape {self.input_shape}")
        self.pool_function = pool_function

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2])

    def get_output_for(self, input, **kwargs):
        return self.pool_function(input.flatten(3), axis=2)
