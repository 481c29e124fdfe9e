"""``lasagne.theano_extensions.conv``: Lasagne's 1-D convolution functions, all on one op.

Lasagne offers six ways to build a 1-D convolution of (batch, channels,
length) inputs with (filters, channels, length) filters out of Theano's
2-D convolution or dot products. Here every one of them is the same
:func:`~theanompi.backend.ops.conv_nd.conv_nd` (a 1-D convolution runs as a
2-D one of height 1 on the im2col + GEMM op), with each function's own
signature and limits kept: ``conv1d_sc``, ``conv1d_unstrided``, ``conv1d_sd``
and ``conv1d_md`` take only ``border_mode='valid'``; the last three need
``image_shape`` and ``filter_shape`` and a filter length that is a multiple
of the stride. ``image_shape`` and ``filter_shape`` are otherwise hints
(None: unknown). ``filter_flip=True`` (the default) convolves (the filters
flipped), False cross-correlates.

Example
-------
>>> import numpy as np, pytensor.tensor as pt
>>> x, w = pt.tensor3("x"), pt.tensor3("w")
>>> out = conv1d_mc0(x, w, subsample=(2,), border_mode=1)
>>> out.eval({x: np.ones((1, 1, 10), x.dtype), w: np.ones((2, 1, 3), w.dtype)}).shape
(1, 2, 5)
"""

from __future__ import annotations

import numbers

from theanompi.backend.ops.conv_nd import conv_nd

__all__ = ["conv1d_mc0", "conv1d_mc1", "conv1d_md", "conv1d_sc", "conv1d_sd", "conv1d_unstrided"]

VALID = ("valid", 0, (0,))


def _filter_length(filters, filter_shape, who):
    length = filter_shape[2] if filter_shape is not None else filters.type.shape[2]
    if length is None:
        raise ValueError(f"{who}: this border_mode needs the filter length; pass filter_shape or filters of a static "
                         "shape")
    return int(length)


def _padding(border_mode, filters, filter_shape, who):
    """Zeros on each side of the length axis for Theano's ``border_mode`` of a 1-D convolution."""
    if isinstance(border_mode, tuple) and len(border_mode) == 1:
        (border_mode,) = border_mode
    if isinstance(border_mode, numbers.Integral) and not isinstance(border_mode, bool) and border_mode >= 0:
        return int(border_mode)
    if border_mode == "valid":
        return 0
    if border_mode == "full":
        return _filter_length(filters, filter_shape, who) - 1
    if border_mode in ("half", "same"):
        return _filter_length(filters, filter_shape, who) // 2
    raise ValueError(f"{who}: unsupported border_mode {border_mode!r}; use 'valid', 'full', 'half' or an int >= 0")


def _stride(subsample, who):
    try:
        (stride,) = subsample
    except (TypeError, ValueError):
        raise ValueError(f"{who}: subsample must be a 1-tuple, got {subsample!r}") from None
    return stride


def _convolve(input, filters, pad, stride, filter_flip, num_groups=1):
    filters = filters[:, :, ::-1] if filter_flip else filters
    return conv_nd(input, filters, stride=stride, pad=pad, groups=num_groups)


def _valid_only(border_mode, who):
    if border_mode not in VALID:
        raise RuntimeError(f"Unsupported border_mode for {who}: {border_mode!r} (only 'valid')")


def _whole_steps(filter_shape, stride, who):
    if filter_shape[2] % stride:
        raise RuntimeError(f"{who}: the filter length ({filter_shape[2]}) is not a multiple of the stride ({stride})")


def conv1d_sc(input, filters, image_shape=None, filter_shape=None, border_mode="valid", subsample=(1,),
              filter_flip=True):
    """1-D convolution (Lasagne: through a single-channel 2-D convolution); 'valid' only."""
    _valid_only(border_mode, "conv1d_sc")
    return _convolve(input, filters, 0, _stride(subsample, "conv1d_sc"), filter_flip)


def conv1d_mc0(input, filters, image_shape=None, filter_shape=None, border_mode="valid", subsample=(1,),
               filter_flip=True, num_groups=1):
    """1-D convolution (Lasagne: through a 2-D convolution of width 1); any border mode, channel groups."""
    pad = _padding(border_mode, filters, filter_shape, "conv1d_mc0")
    return _convolve(input, filters, pad, _stride(subsample, "conv1d_mc0"), filter_flip, num_groups)


def conv1d_mc1(input, filters, image_shape=None, filter_shape=None, border_mode="valid", subsample=(1,),
               filter_flip=True, num_groups=1):
    """1-D convolution (Lasagne: through a 2-D convolution of height 1); any border mode, channel groups."""
    pad = _padding(border_mode, filters, filter_shape, "conv1d_mc1")
    return _convolve(input, filters, pad, _stride(subsample, "conv1d_mc1"), filter_flip, num_groups)


def _strided_valid(input, filters, filter_shape, border_mode, subsample, filter_flip, who):
    stride = _stride(subsample, who)
    _valid_only(border_mode, who)
    _whole_steps(filter_shape, stride, who)
    return _convolve(input, filters, 0, stride, filter_flip)


def conv1d_unstrided(input, filters, image_shape, filter_shape, border_mode="valid", subsample=(1,),
                     filter_flip=True, implementation=conv1d_sc):
    """1-D convolution (Lasagne: a strided one folded into an unstrided one); the filter length a multiple of the
    stride. ``implementation`` is accepted for Lasagne's signature; the one op runs either way."""
    return _strided_valid(input, filters, filter_shape, border_mode, subsample, filter_flip, "conv1d_unstrided")


def conv1d_sd(input, filters, image_shape, filter_shape, border_mode="valid", subsample=(1,), filter_flip=True):
    """1-D convolution (Lasagne: one dot product); 'valid', the filter length a multiple of the stride."""
    return _strided_valid(input, filters, filter_shape, border_mode, subsample, filter_flip, "conv1d_sd")


def conv1d_md(input, filters, image_shape, filter_shape, border_mode="valid", subsample=(1,), filter_flip=True):
    """1-D convolution (Lasagne: several dot products); 'valid', the filter length a multiple of the stride."""
    return _strided_valid(input, filters, filter_shape, border_mode, subsample, filter_flip, "conv1d_md")
