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
>>> from theanompi.nn import InputLayer, MaxPool2DLayer, GlobalPoolLayer
>>> l = MaxPool2DLayer(InputLayer((None, 8, 32, 32)), pool_size=2)
>>> l.output_shape, GlobalPoolLayer(l).output_shape
((None, 8, 16, 16), (None, 8))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from theanompi.backend.ops import avg_pool2d, max_pool2d
from theanompi.nn.layers.base import Layer
from theanompi.nn.layers.conv import _int_pair, _int_tuple

__all__ = [
    "FeaturePoolLayer", "FeatureWTALayer", "GlobalPoolLayer", "MaxPool1DLayer", "MaxPool2DLayer", "MaxPool3DLayer",
    "Pool1DLayer", "Pool2DLayer", "Pool3DLayer", "SpatialPyramidPoolingLayer", "Upscale1DLayer", "Upscale2DLayer",
    "Upscale3DLayer", "pool_2d", "pool_output_length",
]

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


def _extend(x, extension, fill, before=(0, 0)):
    """``x`` with ``before`` (rows, cols) entries of ``fill`` at the top/left and ``extension`` at the bottom/right."""
    rows, cols = x.shape[2], x.shape[3]
    filled = pt.alloc(np.asarray(fill, dtype=x.dtype), x.shape[0], x.shape[1], rows + before[0] + extension[0],
                      cols + before[1] + extension[1])
    return pt.set_subtensor(filled[:, :, before[0]:before[0] + rows, before[1]:before[1] + cols], x)


def _is_symbolic(value):
    return isinstance(value, Variable) or (isinstance(value, (tuple, list))
                                           and any(isinstance(v, Variable) for v in value))


def _symbolic_pair(value, name):
    """``value`` (a length-2 vector expression or two ints/scalar expressions) as two scalar expressions."""
    if isinstance(value, Variable) and value.ndim == 1:
        return value[0], value[1]
    items = tuple(value)
    if len(items) != 2 or not all(isinstance(v, (numbers.Integral, Variable)) for v in items):
        raise ValueError(f"pool_2d: {name} must be 2 ints or scalar expressions, got {value!r}")
    return tuple(pt.as_tensor_variable(v) for v in items)


def pool_2d(input, ws, ignore_border=True, stride=None, pad=(0, 0), mode="max"):
    """2-D pooling of the last two axes of a 4-D expression, Theano's ``pool_2d`` signature (what Lasagne imports).

    With ints (pairs) for ``ws`` and ``stride`` it runs on the pooling ops;
    window sizes or strides given as expressions (a length-2 vector, or a
    pair of scalars; ``ignore_border=True`` and an int ``pad`` only) gather the
    windows by indexing instead (slower; for sizes known only at run time).

    Example
    -------
    >>> x = pt.tensor4("x")
    >>> pool_2d(x, (2, 2)).eval({x: np.arange(16.0, dtype=x.dtype).reshape(1, 1, 4, 4)})[0, 0].tolist()
    [[5.0, 7.0], [13.0, 15.0]]
    >>> ws = pt.ivector("ws")
    >>> pool_2d(x, ws).eval({x: np.arange(16.0, dtype=x.dtype).reshape(1, 1, 4, 4), ws: [2, 4]})[0, 0].tolist()
    [[7.0], [15.0]]
    """
    mode = _check_mode(mode, "pool_2d")
    pad = _int_pair((0, 0) if pad is None else pad, "pool_2d: pad", 0)
    if _is_symbolic(ws) or _is_symbolic(stride):
        if not ignore_border:
            raise ValueError("pool_2d: symbolic window sizes or strides need ignore_border=True")
        ws = _symbolic_pair(ws, "ws")
        stride = ws if stride is None else _symbolic_pair(stride, "stride")
        return _pool_2d_gathered(pt.as_tensor_variable(input), ws, stride, pad, mode)
    ws = _int_pair(ws, "pool_2d: ws", 1)
    stride = ws if stride is None else _int_pair(stride, "pool_2d: stride", 1)
    return _pool_2d(input, ws, stride, pad, ignore_border, mode)


def _window_indices(length, size, stride):
    """(windows, size) indices of the whole windows of ``size`` every ``stride`` along an axis of ``length``."""
    count = (length - size) // stride + 1
    return pt.arange(count)[:, None] * stride + pt.arange(size)[None, :]


def _pool_2d_gathered(input, ws, stride, pad, mode):
    """Pooling with window sizes and strides known only at run time: the windows gathered by indexing."""
    fill = np.finfo(input.dtype).min if mode == "max" else 0

    def windows(x):  # (N, C, rows, k_rows, cols, k_cols)
        rows = _window_indices(x.shape[2], ws[0], stride[0])
        cols = _window_indices(x.shape[3], ws[1], stride[1])
        return x[:, :, rows][:, :, :, :, cols]

    padded = windows(_extend(input, pad, fill, pad))
    if mode == "max":
        return padded.max(axis=(3, 5))
    sums = padded.sum(axis=(3, 5))
    if mode == "average_inc_pad":
        return sums / pt.cast(ws[0] * ws[1], input.dtype)
    ones = _extend(pt.ones((1, 1, input.shape[2], input.shape[3]), dtype=input.dtype), pad, 0, pad)
    return sums / windows(ones).sum(axis=(3, 5))


def _pool_2d(input, pool_size, stride, pad, ignore_border, mode):
    """2-D pooling (the computation of :class:`Pool2DLayer`): the op where it pads enough, else padded here."""
    input = pt.as_tensor_variable(input)
    if any(2 * p > k for p, k in zip(pad, pool_size)):
        return _pool_padded_here(input, pool_size, stride, pad, mode)
    window = dict(pool_size=pool_size, stride=stride, pad=pad)
    partial = not ignore_border
    if partial:
        extension = [_border_extension(input.shape[axis], pool_size[axis - 2], stride[axis - 2])
                     for axis in (2, 3)]
    if mode == "max":
        if partial:
            input = _extend(input, extension, np.finfo(input.dtype).min)
        return max_pool2d(input, **window)
    if mode == "average_inc_pad" and not partial:
        return avg_pool2d(input, **window)
    # Average over the input entries of each window: pooled sums over pooled counts (a mask of ones).
    ones = pt.ones((1, 1, input.shape[2], input.shape[3]), dtype=input.dtype)
    if partial:
        input, ones = _extend(input, extension, 0), _extend(ones, extension, 0)
    return avg_pool2d(input, **window) / avg_pool2d(ones, **window)


def _pool_padded_here(input, pool_size, stride, pad, mode):
    """Pooling with a pad over half the window (the op pads at most half): pad first, then pool unpadded."""
    window = dict(pool_size=pool_size, stride=stride)
    if mode == "max":
        return max_pool2d(_extend(input, pad, np.finfo(input.dtype).min, pad), **window)
    padded = _extend(input, pad, 0, pad)
    if mode == "average_inc_pad":
        return avg_pool2d(padded, **window)
    ones = _extend(pt.ones((1, 1, input.shape[2], input.shape[3]), dtype=input.dtype), pad, 0, pad)
    return avg_pool2d(padded, **window) / avg_pool2d(ones, **window)


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
            raise ValueError(f"{cls}: Expected 4 input dimensions (batch, channels, rows, cols), got input shape "
                             f"{self.input_shape}")
        self.mode = _check_mode(mode, cls)
        self.ignore_border = bool(ignore_border)
        self.pool_size = _int_pair(pool_size, f"{cls}: pool_size", 1)
        self.stride = self.pool_size if stride is None else _int_pair(stride, f"{cls}: stride", 1)
        self.pad = _int_pair(pad, f"{cls}: pad", 0)
        if not self.ignore_border and self.pad != (0, 0):
            raise ValueError(f"{cls}: ignore_border=False needs pad=0 (as in Lasagne), got pad={pad!r}")
        if any(p >= k for p, k in zip(self.pad, self.pool_size)):
            raise ValueError(f"{cls}: pad must be smaller than pool_size, got pad={self.pad} with "
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
        return _pool_2d(input, self.pool_size, self.stride, self.pad, self.ignore_border, self.mode)


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
        self.pool_function = pool_function

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2])

    def get_output_for(self, input, **kwargs):
        return self.pool_function(input.flatten(3), axis=2)


def _check_mode(mode, cls):
    if mode not in MODES:
        raise ValueError(f"{cls}: Mode must be either 'max', 'average_inc_pad' or 'average_exc_pad'. Got {mode!r}")
    return mode


class Pool1DLayer(Layer):
    """1-D pooling of (batch, channels, length) inputs (runs as 2-D pooling with a height of 1).

    Parameters as in :class:`Pool2DLayer`, each a single int.

    Example
    -------
    >>> Pool1DLayer((None, 3, 9), 3, stride=2, pad=1).output_shape
    (None, 3, 5)
    """

    def __init__(self, incoming, pool_size, stride=None, pad=0, ignore_border=True, mode="max", **kwargs):
        super().__init__(incoming, **kwargs)
        cls = type(self).__name__
        if len(self.input_shape) != 3:
            raise ValueError(f"{cls}: Expected 3 input dimensions (batch, channels, length), got input shape "
                             f"{self.input_shape}")
        self.mode = _check_mode(mode, cls)
        self.ignore_border = bool(ignore_border)
        self.pool_size = _int_tuple(pool_size, 1, f"{cls}: pool_size", 1)
        self.stride = self.pool_size if stride is None else _int_tuple(stride, 1, f"{cls}: stride", 1)
        self.pad = _int_tuple(pad, 1, f"{cls}: pad", 0)

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2]) + (pool_output_length(input_shape[2], self.pool_size[0], self.stride[0],
                                                            self.pad[0], self.ignore_border),)

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        pooled = _pool_2d(input.dimshuffle(0, 1, 2, "x"), (self.pool_size[0], 1), (self.stride[0], 1),
                         (self.pad[0], 0), self.ignore_border, self.mode)
        return pooled[:, :, :, 0]


class MaxPool1DLayer(Pool1DLayer):
    """1-D max pooling (:class:`Pool1DLayer` with ``mode='max'``).

    Example
    -------
    >>> MaxPool1DLayer((None, 3, 8), 2).output_shape
    (None, 3, 4)
    """

    def __init__(self, incoming, pool_size, stride=None, pad=0, ignore_border=True, **kwargs):
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


class Pool3DLayer(Layer):
    """3-D pooling of (batch, channels, depth, rows, cols) inputs, with ``ignore_border=True``.

    Pools rows and columns with the 2-D op, then the depth axis with it
    (windows are boxes, so max and both averages separate by axis).

    Example
    -------
    >>> Pool3DLayer((None, 2, 6, 8, 8), 2, mode="average_inc_pad").output_shape
    (None, 2, 3, 4, 4)
    """

    def __init__(self, incoming, pool_size, stride=None, pad=(0, 0, 0), ignore_border=True, mode="max", **kwargs):
        super().__init__(incoming, **kwargs)
        cls = type(self).__name__
        if len(self.input_shape) != 5:
            raise ValueError(f"{cls}: Expected 5 input dimensions (batch, channels, depth, rows, cols), got input "
                             f"shape {self.input_shape}")
        if not ignore_border:
            raise NotImplementedError(f"{cls}: only ignore_border=True is supported")
        self.mode = _check_mode(mode, cls)
        self.ignore_border = True
        self.pool_size = _int_tuple(pool_size, 3, f"{cls}: pool_size", 1)
        self.stride = self.pool_size if stride is None else _int_tuple(stride, 3, f"{cls}: stride", 1)
        self.pad = _int_tuple(pad, 3, f"{cls}: pad", 0)

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2]) + tuple(
            pool_output_length(size, k, s, p) for size, k, s, p in zip(input_shape[2:], self.pool_size, self.stride,
                                                                          self.pad))

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        n, c, depth = input.shape[0], input.shape[1], input.shape[2]
        (kd, kh, kw), (sd, sh, sw), (pd, ph, pw) = self.pool_size, self.stride, self.pad
        planes = _pool_2d(input.reshape((n * c, depth, input.shape[3], input.shape[4])), (kh, kw), (sh, sw),
                         (ph, pw), True, self.mode)
        rows, cols = planes.shape[2], planes.shape[3]
        columns = planes.reshape((n * c, 1, depth, rows * cols))
        pooled = _pool_2d(columns, (kd, 1), (sd, 1), (pd, 0), True, self.mode)
        return pooled.reshape((n, c, pooled.shape[2], rows, cols))


class MaxPool3DLayer(Pool3DLayer):
    """3-D max pooling (:class:`Pool3DLayer` with ``mode='max'``).

    Example
    -------
    >>> MaxPool3DLayer((None, 2, 4, 4, 4), 2).output_shape
    (None, 2, 2, 2, 2)
    """

    def __init__(self, incoming, pool_size, stride=None, pad=(0, 0, 0), ignore_border=True, **kwargs):
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


class _UpscaleLayer(Layer):
    """Upscales the ``n`` trailing axes by integer factors: 'repeat' copies each entry, 'dilate' puts zeros between."""

    n = 0

    def __init__(self, incoming, scale_factor, mode="repeat", **kwargs):
        super().__init__(incoming, **kwargs)
        cls = type(self).__name__
        self.scale_factor = _int_tuple(scale_factor, self.n, f"{cls}: scale_factor", 1)
        if mode not in ("repeat", "dilate"):
            raise ValueError(f"{cls}: Mode must be either 'repeat' or 'dilate', not {mode!r}")
        self.mode = mode

    def get_output_shape_for(self, input_shape):
        head = tuple(input_shape[:len(input_shape) - self.n])
        return head + tuple(None if size is None else size * f
                            for size, f in zip(input_shape[-self.n:], self.scale_factor))

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        first = input.ndim - self.n
        if self.mode == "repeat":
            for axis, factor in enumerate(self.scale_factor, start=first):
                if factor > 1:
                    input = pt.repeat(input, factor, axis=axis)
            return input
        if all(f == 1 for f in self.scale_factor):
            return input
        shape = [input.shape[a] for a in range(first)] + [input.shape[first + i] * f
                                                          for i, f in enumerate(self.scale_factor)]
        spots = (slice(None),) * first + tuple(slice(None, None, f) for f in self.scale_factor)
        return pt.set_subtensor(pt.zeros(shape, dtype=input.dtype)[spots], input)


class Upscale1DLayer(_UpscaleLayer):
    """Upscales the last axis of (batch, channels, length) by ``scale_factor``.

    Example
    -------
    >>> Upscale1DLayer((None, 2, 5), 3).output_shape
    (None, 2, 15)
    """

    n = 1


class Upscale2DLayer(_UpscaleLayer):
    """Upscales rows and columns of (batch, channels, rows, cols) by ``scale_factor``.

    Example
    -------
    >>> Upscale2DLayer((None, 2, 5, 4), (2, 3), mode="dilate").output_shape
    (None, 2, 10, 12)
    """

    n = 2


class Upscale3DLayer(_UpscaleLayer):
    """Upscales the three trailing axes of (batch, channels, depth, rows, cols) by ``scale_factor``.

    Example
    -------
    >>> Upscale3DLayer((None, 2, 2, 3, 4), 2).output_shape
    (None, 2, 4, 6, 8)
    """

    n = 3


def _feature_groups(layer, pool_size, axis, what):
    cls = type(layer).__name__
    size = layer.input_shape[axis]
    if isinstance(pool_size, bool) or not isinstance(pool_size, numbers.Integral) or pool_size < 1:
        raise ValueError(f"{cls}: pool_size must be a positive int, got {pool_size!r}")
    if size is None or size % pool_size:
        raise ValueError(f"{cls}: Number of input feature maps ({size}) is not a multiple of the {what} "
                         f"(pool_size={pool_size})")
    return int(pool_size)


def _grouped(input, axis, pool_size):
    """``input`` with ``axis`` split into (groups, pool_size)."""
    shape = [input.shape[a] for a in range(input.ndim)]
    shape[axis:axis + 1] = [shape[axis] // pool_size, pool_size]
    return input.reshape(shape, ndim=input.ndim + 1)


class FeaturePoolLayer(Layer):
    """Pools each group of ``pool_size`` consecutive features along ``axis`` (maxout with ``pt.max``).

    Example
    -------
    >>> FeaturePoolLayer((None, 12, 5), 3).output_shape
    (None, 4, 5)
    """

    def __init__(self, incoming, pool_size, axis=1, pool_function=pt.max, **kwargs):
        super().__init__(incoming, **kwargs)
        self.axis = axis
        self.pool_size = _feature_groups(self, pool_size, axis, "pool size")
        self.pool_function = pool_function

    def get_output_shape_for(self, input_shape):
        shape = list(input_shape)
        shape[self.axis] = None if shape[self.axis] is None else shape[self.axis] // self.pool_size
        return tuple(shape)

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        axis = self.axis % input.ndim
        return self.pool_function(_grouped(input, axis, self.pool_size), axis=axis + 1)


class FeatureWTALayer(Layer):
    """Winner takes all: in each group of ``pool_size`` features along ``axis`` only the largest stays, the rest are 0.

    Example
    -------
    >>> FeatureWTALayer((None, 6), 3).output_shape
    (None, 6)
    """

    def __init__(self, incoming, pool_size, axis=1, **kwargs):
        super().__init__(incoming, **kwargs)
        self.axis = axis
        self.pool_size = _feature_groups(self, pool_size, axis, "region size")

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        axis = self.axis % input.ndim
        grouped = _grouped(input, axis, self.pool_size)
        winners = pt.argmax(grouped, axis=axis + 1, keepdims=True)
        positions = pt.arange(self.pool_size).dimshuffle(["x"] * (axis + 1) + [0] + ["x"] * (input.ndim - axis - 1))
        mask = pt.eq(winners, positions).reshape(input.shape)
        return input * mask


class SpatialPyramidPoolingLayer(Layer):
    """Pools each channel over an n x n grid of regions for each n in ``pool_dims``: (N, C, H, W) -> (N, C, sum n**2).

    ``implementation='fast'``: windows of ``ceil(size / n)`` every
    ``size // n``; ``'kaiming'``: region i spans ``floor(i * size / n)`` to
    ``ceil((i + 1) * size / n)`` (He et al.). ``mode``: 'max', or an average.

    Example
    -------
    >>> SpatialPyramidPoolingLayer((None, 3, 13, 13), pool_dims=[4, 2, 1]).output_shape
    (None, 3, 21)
    """

    def __init__(self, incoming, pool_dims=(4, 2, 1), mode="max", implementation="fast", **kwargs):
        super().__init__(incoming, **kwargs)
        cls = type(self).__name__
        if len(self.input_shape) != 4:
            raise ValueError(f"{cls}: Expected 4 input dimensions (batch, channels, rows, cols), got input shape "
                             f"{self.input_shape}")
        self.mode = _check_mode(mode, cls)
        if implementation not in ("fast", "kaiming"):
            raise ValueError(f"{cls}: implementation must be 'fast' or 'kaiming', got {implementation!r}")
        self.implementation = implementation
        self.pool_dims = list(pool_dims)

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], input_shape[1], sum(n * n for n in self.pool_dims))

    def _bounds(self, size, n, i):
        if self.implementation == "kaiming":
            return (i * size) // n, -((-(i + 1) * size) // n)
        window, step = -(-size // n), size // n
        return i * step, i * step + window

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        reduce = pt.max if self.mode == "max" else pt.mean
        rows, cols = (fixed if fixed is not None else symbolic
                      for fixed, symbolic in zip(self.input_shape[2:], input.shape[2:]))
        pooled = []
        for n in self.pool_dims:
            for r in range(n):
                r0, r1 = self._bounds(rows, n, r)
                for c in range(n):
                    c0, c1 = self._bounds(cols, n, c)
                    pooled.append(reduce(input[:, :, r0:r1, c0:c1], axis=(2, 3)))
        return pt.stack(pooled, axis=2)
