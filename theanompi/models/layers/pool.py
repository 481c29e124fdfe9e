"""Pooling layers on :func:`theanompi.models.ops.max_pool2d` / ``avg_pool2d``.

Only Lasagne's ``ignore_border=True`` (floor) output size is supported; the
output length is ``(size + 2*pad - pool_size) // stride + 1`` and ``pad`` may be
at most half the window. Average pooling counts padded zeros
(``mode='average_inc_pad'``).

Example
-------
>>> from theanompi.models.layers import InputLayer, MaxPool2DLayer, GlobalPoolLayer
>>> l = MaxPool2DLayer(InputLayer((None, 8, 32, 32)), pool_size=2)
>>> l.output_shape, GlobalPoolLayer(l).output_shape
((None, 8, 16, 16), (None, 8))
"""

from __future__ import annotations

import pytensor.tensor as pt

from theanompi.models.layers.base import Layer
from theanompi.models.layers.conv import _int_pair
from theanompi.models.ops import avg_pool2d, max_pool2d

__all__ = ["GlobalPoolLayer", "MaxPool2DLayer", "Pool2DLayer", "pool_output_length"]

MODES = ("max", "average_inc_pad")


def pool_output_length(input_length, pool_size, stride, pad):
    """Output length of a pooling along one axis (floor mode; None if ``input_length`` is None).

    Example
    -------
    >>> pool_output_length(7, 2, 2, 0), pool_output_length(7, 3, 2, 1)
    (3, 4)
    """
    if input_length is None:
        return None
    return (input_length + 2 * pad - pool_size) // stride + 1


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
        Must be True (the only mode the ops implement).
    mode : {'max', 'average_inc_pad'}

    Raises
    ------
    ValueError
        For a non-4-D input, ``ignore_border=False``, an unknown mode, too much
        padding, or a window larger than the padded input.

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
        if not ignore_border:
            raise ValueError(f"{cls}: ignore_border={ignore_border!r} is not supported; only ignore_border=True "
                             "(floor output size)")
        if mode not in MODES:
            raise ValueError(f"{cls}: mode={mode!r} is not supported; use one of {', '.join(MODES)}")
        self.mode = mode
        self.ignore_border = True
        self.pool_size = _int_pair(pool_size, f"{cls}: pool_size", 1)
        self.stride = self.pool_size if stride is None else _int_pair(stride, f"{cls}: stride", 1)
        self.pad = _int_pair(pad, f"{cls}: pad", 0)
        for p, k in zip(self.pad, self.pool_size):
            if 2 * p > k:
                raise ValueError(f"{cls}: pad must be at most half of pool_size, got pad={self.pad} with "
                                 f"pool_size={self.pool_size}")
        for axis in (2, 3):
            size, k, p = self.input_shape[axis], self.pool_size[axis - 2], self.pad[axis - 2]
            if size is not None and size + 2 * p < k:
                raise ValueError(f"{cls}: pool size {k} is larger than the padded input {size} + 2*{p} "
                                 f"(input shape {self.input_shape})")

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2]) + tuple(
            pool_output_length(input_shape[axis], self.pool_size[axis - 2], self.stride[axis - 2],
                               self.pad[axis - 2])
            for axis in (2, 3)
        )

    def get_output_for(self, input, **kwargs):
        pool = max_pool2d if self.mode == "max" else avg_pool2d
        return pool(input, self.pool_size, stride=self.stride, pad=self.pad)


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
