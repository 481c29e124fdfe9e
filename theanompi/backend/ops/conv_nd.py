"""1-, 2- and 3-D convolutions with dilation and groups, built on the :class:`~theanompi.backend.ops.Conv2d` op.

:func:`conv_nd` is the cross-correlation ``y[n, o, i...] = sum_{c, a...}
W[o, c, a...] * xpad[n, g*C/G + c, i*s + a*d ...]`` of an (N, C, spatial...)
input with (O, C/groups, k...) filters, for 1 to 3 spatial axes:

* 1-D runs as 2-D with a height of 1;
* 2-D is the op itself (im2col + BLAS GEMM, with its C gradients);
* 3-D moves the output depth into the batch and the filter depth into the
  channels, then runs one 2-D convolution;
* a dilation ``d > 1`` spreads the filter taps ``d`` apart (zeros between
  them), then convolves as above;
* ``groups > 1`` convolves each group of channels with its filters and
  concatenates the results.

Everything is differentiable (the op's gradients and pytensor's own for
the reshapes). :func:`conv_nd_transpose` is the adjoint of :func:`conv_nd`
with respect to its input (a "transposed convolution"), taken by pytensor's
``pullback`` through the same graph: for 2-D it is the op's own input gradient.

Example
-------
>>> import numpy as np, pytensor.tensor as pt
>>> x = pt.tensor5("x"); W = pt.tensor("W", shape=(3, 2, 3, 3, 3))
>>> y = conv_nd(x, W, stride=(1, 2, 2), pad=(1, 1, 1))
>>> y.eval({x: np.ones((1, 2, 4, 6, 6), x.dtype), W: np.ones((3, 2, 3, 3, 3), W.dtype)}).shape
(1, 3, 4, 3, 3)
"""

from __future__ import annotations

import numbers

import pytensor
import pytensor.tensor as pt
from pytensor.scalar import upcast

from theanompi.backend.ops.conv import conv2d

__all__ = ["conv_nd", "conv_nd_transpose", "dilate_filters"]


def _ints(value, n, name, minimum):
    """``value`` (an int or n ints) as a tuple of n ints, each ``>= minimum``, or ValueError."""
    items = (value,) * n if isinstance(value, numbers.Integral) else tuple(value)
    if len(items) != n or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
        raise ValueError(f"conv_nd: {name} must be an int or {n} ints, got {value!r}")
    if min(items) < minimum:
        raise ValueError(f"conv_nd: {name} must be >= {minimum}, got {value!r}")
    return tuple(int(v) for v in items)


def dilate_filters(W, dilation):
    """``W`` (O, C, k...) with ``dilation[i] - 1`` zeros between the taps of spatial axis ``i``.

    Example
    -------
    >>> import numpy as np
    >>> dilate_filters(pt.as_tensor_variable(np.ones((1, 1, 2))), (3,)).eval().tolist()
    [[[1.0, 0.0, 0.0, 1.0]]]
    """
    if all(d == 1 for d in dilation):
        return W
    sizes = [(W.shape[2 + i] - 1) * d + 1 for i, d in enumerate(dilation)]
    spread = pt.zeros((W.shape[0], W.shape[1], *sizes), dtype=W.dtype)
    taps = (slice(None), slice(None)) + tuple(slice(None, None, d) for d in dilation)
    return pt.set_subtensor(spread[taps], W)


def _pad_depth(x, pad):
    """``x`` (N, C, D, H, W) with ``pad`` zeros before and after the depth axis."""
    if pad == 0:
        return x
    shape = (x.shape[0], x.shape[1], x.shape[2] + 2 * pad, x.shape[3], x.shape[4])
    return pt.set_subtensor(pt.zeros(shape, dtype=x.dtype)[:, :, pad:pad + x.shape[2]], x)


def _conv3d(x, W, stride, pad):
    """3-D cross-correlation as one 2-D convolution: output depths into the batch, filter depths into the channels."""
    (sd, sh, sw), (pd, ph, pw) = stride, pad
    xp = _pad_depth(x, pd)
    kd = W.type.shape[2]
    if kd is None:
        raise ValueError(f"conv_nd: 3-D filters need a static depth (shape {W.type.shape}); give W a static shape")
    n, c = x.shape[0], x.shape[1]
    depth_out = (xp.shape[2] - kd) // sd + 1
    # (N, C, Do, H, W) for each filter depth a, stacked along the channels: (N*Do, kd*C, H, W)
    slices = [xp[:, :, a:a + sd * (depth_out - 1) + 1:sd].dimshuffle(0, 2, 1, 3, 4) for a in range(kd)]
    stacked = pt.concatenate(slices, axis=2).reshape((n * depth_out, kd * c, x.shape[3], x.shape[4]))
    W2 = W.dimshuffle(0, 2, 1, 3, 4).reshape((W.shape[0], kd * W.shape[1], W.shape[3], W.shape[4]))
    out = conv2d(stacked, W2, stride=(sh, sw), pad=(ph, pw))
    return out.reshape((n, depth_out, W.shape[0], out.shape[2], out.shape[3])).dimshuffle(0, 2, 1, 3, 4)


def _conv_one_group(x, W, stride, pad):
    n = x.ndim - 2
    if n == 1:
        out = conv2d(x.dimshuffle(0, 1, "x", 2), W.dimshuffle(0, 1, "x", 2), stride=(1, stride[0]), pad=(0, pad[0]))
        return out[:, :, 0, :]
    if n == 2:
        return conv2d(x, W, stride=stride, pad=pad)
    return _conv3d(x, W, stride, pad)


def conv_nd(x, W, stride=1, pad=0, dilation=1, groups=1):
    """Cross-correlation of (N, C, spatial...) ``x`` with (O, C/groups, k...) ``W``, 1 to 3 spatial axes.

    Parameters
    ----------
    x, W : TensorVariable
        Of ``n + 2`` dimensions each; float32 or float64 (a mix is upcast).
    stride, pad, dilation : int or n ints
        Step between windows, zeros added on both sides, spacing of the filter taps.
    groups : int
        Channel groups: group ``g`` of the input channels meets group ``g`` of the filters.

    Returns
    -------
    TensorVariable
        (N, O, (size + 2*pad - (k-1)*dilation - 1) // stride + 1 per spatial axis).

    Example
    -------
    >>> import numpy as np
    >>> x = pt.tensor3("x")
    >>> conv_nd(x, np.ones((2, 1, 2)), dilation=2, groups=2).eval({x: np.ones((1, 2, 5), x.dtype)}).shape
    (1, 2, 3)
    """
    x, W = pt.as_tensor_variable(x), pt.as_tensor_variable(W)
    n = x.ndim - 2
    if n not in (1, 2, 3) or W.ndim != x.ndim:
        raise ValueError(f"conv_nd: x and W must both have 3, 4 or 5 dimensions, got x.ndim={x.ndim}, W.ndim={W.ndim}")
    stride, pad = _ints(stride, n, "stride", 1), _ints(pad, n, "pad", 0)
    dilation = _ints(dilation, n, "dilation", 1)
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise ValueError(f"conv_nd: groups must be a positive int, got {groups!r}")
    dtype = upcast(x.dtype, W.dtype)
    depth = W.type.shape[2] if n == 3 else None
    x, W = x.astype(dtype), dilate_filters(W.astype(dtype), dilation)
    if depth is not None:  # the 3-D path unrolls the filter depth: keep it static through the dilation
        W = pt.specify_shape(W, (None, None, (depth - 1) * dilation[0] + 1, None, None))
    if groups == 1:
        return _conv_one_group(x, W, stride, pad)
    in_per_group, out_per_group = x.shape[1] // groups, W.shape[0] // groups
    return pt.concatenate([
        _conv_one_group(x[:, g * in_per_group:(g + 1) * in_per_group], W[g * out_per_group:(g + 1) * out_per_group],
                        stride, pad)
        for g in range(groups)
    ], axis=1)


def conv_nd_transpose(y, W, input_shape, stride=1, pad=0, dilation=1, groups=1):
    """The adjoint of :func:`conv_nd` with respect to its input: a transposed convolution.

    ``y`` has the shape of a ``conv_nd(x, W, ...)`` output; the result has
    ``input_shape`` (the shape of such an ``x``, ints or scalar expressions):
    each entry of ``y`` scatters its filter into a stride-spaced window.

    Example
    -------
    >>> import numpy as np
    >>> y = pt.tensor4("y")
    >>> out = conv_nd_transpose(y, np.ones((1, 1, 3, 3)), (1, 1, 5, 5), stride=2)
    >>> out.eval({y: np.ones((1, 1, 2, 2), y.dtype)})[0, 0, 0].tolist()
    [1.0, 1.0, 2.0, 1.0, 1.0]
    """
    y, W = pt.as_tensor_variable(y), pt.as_tensor_variable(W)
    dtype = upcast(y.dtype, W.dtype)
    like_input = pt.zeros(tuple(input_shape), dtype=dtype)
    forward = conv_nd(like_input, W.astype(dtype), stride, pad, dilation, groups)
    return pytensor.gradient.pullback(forward, like_input, y.astype(dtype))
