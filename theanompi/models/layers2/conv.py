"""Convolution and pooling layers: :class:`Conv`, :class:`Pool` (bc01), :class:`ConvPoolLRN` (c01b, AlexNet)
and :class:`ConvPoolLRN_bc01` (GoogLeNet's stem).

Convolutions run on :func:`theanompi.backend.ops.conv2d` and compute a true convolution (filters flipped), like
cuDNN's default ``conv_mode='conv'`` that Theano-MPI used, so weights saved by Theano-MPI load unchanged. The
``lib_conv`` argument ('cudnn', 'corrmm', 'cudaconvnet') selects no library here; it only keeps
Theano-MPI's pooling border rule: ``'corrmm'`` pools with partial windows at the bottom/right border
(``ignore_border=False``), the others drop them (cuDNN).

Example
-------
>>> import numpy as np, pytensor.tensor as pt
>>> from theanompi.models.layers2.weights import Normal, Constant
>>> conv = Conv(pt.tensor4("x"), convstride=1, padsize=0, W=Normal((8, 3, 5, 5)), b=Constant((8,)),
...             input_shape=(16, 3, 28, 28), printinfo=False)
>>> pool = Pool(conv, poolsize=2, poolstride=2, poolpad=0, printinfo=False)
>>> conv.output_shape, pool.output_shape
((16, 8, 24, 24), (16, 8, 12, 12))
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt

from theanompi.backend.ops import avg_pool2d, conv2d, max_pool2d
from theanompi.backend.ops._common import normalize_pair, out_length
from theanompi.models.layers2.base import Layer
from theanompi.models.layers2.normalization import CrossChannelNormalization
from theanompi.models.layers2.weights import Constant, Normal

__all__ = ["Conv", "ConvPoolLRN", "ConvPoolLRN_bc01", "Pool", "conv_relu", "pool_bc01"]

LIB_CONVS = ("cudnn", "corrmm", "cudaconvnet")
POOL_MODES = ("max", "average", "average_inc_pad", "average_exc_pad", "sum")


def _check_lib_conv(lib_conv, who: str) -> None:
    if lib_conv not in LIB_CONVS:
        raise ValueError(f"{who}: lib_conv={lib_conv!r} is not known; use one of {', '.join(LIB_CONVS)}")


def resolve_pad(padsize, kernel: tuple[int, int], who: str) -> tuple[int, int]:
    """Theano's ``border_mode`` (int, pair, 'valid', 'full' or 'half') as a pair of paddings.

    Example
    -------
    >>> resolve_pad("half", (5, 3), "Conv"), resolve_pad(2, (5, 5), "Conv")
    ((2, 1), (2, 2))
    """
    if isinstance(padsize, str):
        rules = {"valid": lambda k: 0, "full": lambda k: k - 1, "half": lambda k: k // 2}
        if padsize not in rules:
            raise ValueError(f"{who}: padsize={padsize!r} is not allowed; use an int, a pair, 'valid', 'full' "
                             "or 'half'")
        return tuple(rules[padsize](k) for k in kernel)
    return normalize_pair(padsize, f"{who}: padsize", minimum=0)


def conv_relu(x, W_oihw, b, stride, pad):
    """``max(conv(x, W) + b, 0)`` for bc01 ``x`` and (out, in, rows, cols) filters, true convolution.

    Example
    -------
    >>> y = conv_relu(pt.tensor4("x"), pt.tensor4("W"), pt.vector("b"), (1, 1), (0, 0))
    >>> y.ndim
    4
    """
    flipped = W_oihw[:, :, ::-1, ::-1]
    return pt.maximum(conv2d(x, flipped, stride=stride, pad=pad, bias=b), 0)


def _conv_geometry(input_shape, filter_shape, stride, pad, who):
    """Output (rows, cols) of a bc01 convolution, with shape checks."""
    if len(input_shape) != 4:
        raise ValueError(f"{who}: input must be 4-D, got input shape {tuple(input_shape)}")
    if input_shape[1] != filter_shape[1]:
        raise ValueError(f"{who}: filters of shape {tuple(filter_shape)} expect {filter_shape[1]} input channels, "
                         f"the input (bc01) has shape {tuple(input_shape)}")
    sizes = tuple(out_length(input_shape[a], filter_shape[a], stride[a - 2], pad[a - 2]) for a in (2, 3))
    if min(sizes) < 1:
        raise ValueError(f"{who}: filter {tuple(filter_shape[2:])} with padding {pad} does not fit input "
                         f"{tuple(input_shape)}")
    return sizes


def pool_length(size: int, window: int, stride: int, pad: int, ignore_border: bool) -> int:
    """Pooled length along one axis: floor mode (cuDNN) or, without ``ignore_border``, Theano's partial-window rule.

    Example
    -------
    >>> pool_length(55, 3, 2, 0, True), pool_length(13, 3, 2, 0, True), pool_length(14, 3, 2, 0, False)
    (27, 6, 7)
    """
    if ignore_border:
        return out_length(size, window, stride, pad)
    if stride >= window:
        return (size - 1) // stride + 1
    return max(0, (size - 1 - window + stride) // stride) + 1


def pool_bc01(x, input_shape, poolsize, poolstride, poolpad, mode="max", ignore_border=True):
    """Pool a bc01 tensor of known ``input_shape``; returns ``(output, output_shape)``.

    Modes: 'max'; 'average'/'average_inc_pad' (padding counted in the divisor); 'average_exc_pad'
    (padding not counted); 'sum'. ``ignore_border=False`` (max only, no padding) keeps partial windows.

    Example
    -------
    >>> y, shape = pool_bc01(pt.tensor4("x"), (2, 3, 7, 7), 3, 2, 0, "average_exc_pad")
    >>> shape
    (2, 3, 3, 3)
    """
    if mode not in POOL_MODES:
        raise ValueError(f"Pool: mode={mode!r} is not supported; use one of {', '.join(POOL_MODES)}")
    window = normalize_pair(poolsize, "Pool: poolsize", minimum=1)
    stride = normalize_pair(poolstride, "Pool: poolstride", minimum=1)
    pad = normalize_pair(poolpad, "Pool: poolpad", minimum=0)
    n, c, rows, cols = input_shape
    out_hw = tuple(pool_length(s, k, st, p, ignore_border) for s, k, st, p in zip((rows, cols), window, stride, pad))
    if min(out_hw) < 1:
        raise ValueError(f"Pool: window {window} with padding {pad} does not fit input {tuple(input_shape)}")
    if not ignore_border:
        if mode != "max" or pad != (0, 0):
            raise ValueError(f"Pool: partial border windows need mode='max' and no padding, got mode={mode!r}, "
                             f"pad={pad}")
        x = _pad_bottom_right(x, input_shape, tuple((o - 1) * st + k for o, st, k in zip(out_hw, stride, window)))
    if mode == "max":
        out = max_pool2d(x, window, stride, pad)
    else:
        out = avg_pool2d(x, window, stride, pad)
        if mode == "sum":
            out = out * np.asarray(window[0] * window[1], dtype=x.dtype)
        elif mode == "average_exc_pad" and pad != (0, 0):
            share = avg_pool2d(pt.constant(np.ones((1, 1, rows, cols), dtype=x.dtype)), window, stride, pad)
            out = out / share
    return out, (n, c) + out_hw


def _pad_bottom_right(x, input_shape, needed):
    """Extend rows/cols of bc01 ``x`` to ``needed`` with -inf (no-op where already long enough)."""
    extra = tuple(max(0, want - have) for want, have in zip(needed, input_shape[2:]))
    if extra == (0, 0):
        return x
    n, c, rows, cols = input_shape
    filled = pt.full((x.shape[0], x.shape[1], rows + extra[0], cols + extra[1]), -np.inf, dtype=x.dtype)
    return pt.set_subtensor(filled[:, :, :rows, :cols], x)


class Conv(Layer):
    """Convolution + bias + ReLU on bc01 input; filters ``W`` of shape (out, in, rows, cols).

    Parameters
    ----------
    convstride : int
    padsize : int, pair, 'valid', 'full' or 'half'
    b : Weight
        Bias, shape (out,).
    W : Weight, optional
        Filters; default ``Normal(filter_shape, std=0.1)``.
    filter_shape : tuple, optional
        Needed when W is not given; checked against W when both are.

    Example
    -------
    >>> from theanompi.models.layers2.weights import Constant
    >>> Conv(pt.tensor4("x"), 2, "half", b=Constant((4,)), filter_shape=(4, 3, 3, 3),
    ...      input_shape=(1, 3, 9, 9), printinfo=False).output_shape
    (1, 4, 5, 5)
    """

    def __init__(self, input, convstride, padsize, b, W=None, filter_shape=None, lib_conv="cudnn",
                 printinfo=True, input_shape=None, output_shape=None):
        _check_lib_conv(lib_conv, "Conv")
        self.get_input_shape(input, input_shape)
        if W is None and filter_shape is None:
            raise ValueError("Conv: give W (a Weight) or filter_shape")
        if b is None:
            raise ValueError("Conv: b (a Weight of shape (n_filters,)) is required")
        self.W = W if W is not None else Normal(filter_shape, mean=0.0, std=0.1)
        self.b = b
        if filter_shape is not None and tuple(self.W.shape) != tuple(filter_shape):
            raise ValueError(f"Conv: W has shape {self.W.shape} but filter_shape={tuple(filter_shape)}")
        self.filter_shape = tuple(self.W.shape)
        if len(self.filter_shape) != 4 or tuple(b.shape) != (self.filter_shape[0],):
            raise ValueError(f"Conv: W must be 4-D (out, in, rows, cols) and b of shape (out,), got W "
                             f"{self.filter_shape} and b {b.shape}")
        self.convstride, self.padsize, self.lib_conv = convstride, padsize, lib_conv
        stride = normalize_pair(convstride, "Conv: convstride", minimum=1)
        pad = resolve_pad(padsize, self.filter_shape[2:], "Conv")
        out_hw = _conv_geometry(self.input_shape, self.filter_shape, stride, pad, "Conv")
        self.output = conv_relu(self.input, self.W.val, self.b.val, stride, pad)
        self.params = [self.W.val, self.b.val]
        self.weight_type = ["W", "b"]
        self.set_output_shape((self.input_shape[0], self.filter_shape[0]) + out_hw, output_shape)
        self.name = "Conv"  # lib_conv is accepted for compatibility; our Conv2d op runs whatever it says
        if printinfo:
            self.print_shape()


class Pool(Layer):
    """Pooling of bc01 input (cuDNN border rule: windows must fit the padded input).

    ``mode``: 'max', 'average' (= 'average_inc_pad'), 'average_exc_pad' or 'sum'. ``poolsize=1`` passes the
    input through.

    Example
    -------
    >>> Pool(pt.tensor4("x"), 3, 1, 1, input_shape=(2, 4, 8, 8), printinfo=False).output_shape
    (2, 4, 8, 8)
    """

    name = "Pool"

    def __init__(self, input, poolsize, poolstride, poolpad, mode="max", printinfo=True, input_shape=None,
                 output_shape=None):
        self.get_input_shape(input, input_shape)
        if len(self.input_shape) != 4:
            raise ValueError(f"Pool: input must be 4-D bc01, got input shape {self.input_shape}")
        self.poolsize, self.poolstride, self.poolpad, self.mode = poolsize, poolstride, poolpad, mode
        if poolsize == 1:
            self.output, computed = self.input, self.input_shape
        else:
            self.output, computed = pool_bc01(self.input, self.input_shape, poolsize, poolstride, poolpad, mode)
        self.set_output_shape(computed, output_shape)
        if printinfo:
            self.print_shape()


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class ConvPoolLRN(Layer):
    """AlexNet's block on c01b data: convolution + ReLU, max pooling, optional LRN.

    Parameters
    ----------
    input : Layer or TensorVariable
        c01b (channels, rows, cols, batch).
    filter_shape : tuple
        c01b filters (in, rows, cols, out); weights ``Normal(std=0.01)``. With ``group=2`` the channels
        are split in two halves with separate weights (``params`` = [W0, b0, W1, b1]).
    b : float
        Initial bias value.
    W : Weight, optional
        c01b filters instead of ``filter_shape`` (``group=1`` only).
    poolsize, poolstride : int
        ``poolsize=1``: no pooling.
    lrn : bool
        Cross-channel normalisation (:class:`CrossChannelNormalization`) of the output.

    Example
    -------
    >>> l = ConvPoolLRN(pt.tensor4("x"), convstride=4, padsize=0, poolsize=3, poolstride=2, group=1, b=0.0,
    ...                 filter_shape=(3, 11, 11, 8), lrn=True, input_shape=(3, 67, 67, 2), printinfo=False)
    >>> l.output_shape, l.weight_type
    ((8, 7, 7, 2), ['W', 'b'])
    """

    def __init__(self, input, convstride, padsize, poolsize, poolstride, group, b, W=None, filter_shape=None,
                 poolpad=0, mode="max", lrn=False, lib_conv="cudnn", printinfo=True, input_shape=None,
                 output_shape=None):
        _check_lib_conv(lib_conv, "ConvPoolLRN")
        self.get_input_shape(input, input_shape)
        if group not in (1, 2):
            raise ValueError(f"ConvPoolLRN: group must be 1 or 2, got {group!r}")
        if not _is_number(b):
            raise ValueError(f"ConvPoolLRN: b is the initial bias value (a number), got {b!r}")
        self.convstride, self.padsize, self.lib_conv = convstride, padsize, lib_conv
        self.poolsize, self.poolstride, self.poolpad, self.lrn = poolsize, poolstride, poolpad, lrn
        channels = self.input_shape[0]
        if channels % group:
            raise ValueError(f"ConvPoolLRN: {channels} input channels cannot be split into {group} groups")
        weights = self._make_weights(group, b, W, filter_shape)
        x = self.input.dimshuffle(3, 0, 1, 2)
        bc01_shape = (self.input_shape[3],) + self.input_shape[:3]
        stride = normalize_pair(convstride, "ConvPoolLRN: convstride", minimum=1)
        part = channels // group
        outs = []
        for g, (W_g, b_g) in enumerate(weights):
            oihw = tuple(W_g.shape[i] for i in (3, 0, 1, 2))
            pad = resolve_pad(padsize, oihw[2:], "ConvPoolLRN")
            out_hw = _conv_geometry(bc01_shape[:1] + (part,) + bc01_shape[2:], oihw, stride, pad, "ConvPoolLRN")
            outs.append(conv_relu(x[:, g * part:(g + 1) * part], W_g.val.dimshuffle(3, 0, 1, 2), b_g.val,
                                  stride, pad))
        out = outs[0] if group == 1 else pt.concatenate(outs, axis=1)
        out_shape = (bc01_shape[0], sum(W_g.shape[3] for W_g, _ in weights)) + out_hw
        if poolsize != 1:
            out, out_shape = pool_bc01(out, out_shape, poolsize, poolstride, poolpad, mode,
                                       ignore_border=lib_conv != "corrmm")
        self.output = out.dimshuffle(1, 2, 3, 0)
        if lrn:
            self.lrn_func = CrossChannelNormalization()
            self.output = self.lrn_func(self.output)
        self.params = [w.val for pair in weights for w in pair]
        self.weight_type = ["W", "b"] * group
        self.set_output_shape(out_shape[1:] + out_shape[:1], output_shape)
        self.name = "ConvPoolLRN"
        if printinfo:
            self.print_shape()

    def _make_weights(self, group, b, W, filter_shape):
        """[(W, b)] per group, also stored as W/b or W0/b0/W1/b1 as in Theano-MPI."""
        if (W is None) == (filter_shape is None):
            raise ValueError("ConvPoolLRN: give exactly one of W and filter_shape")
        if W is not None:
            if group != 1:
                raise ValueError("ConvPoolLRN: a given W needs group=1")
            self.filter_shape = tuple(W.shape)
            self.W, self.b = W, Constant(self.filter_shape[3], val=b)
            return [(self.W, self.b)]
        shape = [int(d) for d in filter_shape]
        if len(shape) != 4:
            raise ValueError(f"ConvPoolLRN: filter_shape must be c01b (in, rows, cols, out), got {filter_shape!r}")
        if group == 1:
            self.filter_shape = tuple(shape)
            self.W, self.b = Normal(self.filter_shape, mean=0, std=0.01), Constant(shape[3], val=b)
            return [(self.W, self.b)]
        if shape[0] % 2 or shape[3] % 2:
            raise ValueError(f"ConvPoolLRN: group=2 needs even in/out channels in filter_shape, got {filter_shape!r}")
        self.filter_shape = (shape[0] // 2, shape[1], shape[2], shape[3] // 2)
        self.W0 = Normal(self.filter_shape, mean=0, std=0.01)
        self.W1 = Normal(self.filter_shape, mean=0, std=0.01)
        self.b0 = Constant(self.filter_shape[3], val=b)
        self.b1 = Constant(self.filter_shape[3], val=b)
        return [(self.W0, self.b0), (self.W1, self.b1)]


class ConvPoolLRN_bc01(Layer):
    """GoogLeNet's stem block on bc01 data: :class:`Conv`'s convolution + ReLU, pooling, optional LRN.

    ``W``/``b`` are Weights as for :class:`Conv`; ``poolpad`` and ``mode`` apply to the pooling. The LRN
    normalises across channels (axis 1); Theano-MPI applied its c01b normalisation to axis 0 here, i.e.
    across the batch, which we do not reproduce.

    Example
    -------
    >>> from theanompi.models.layers2.weights import Constant, Normal
    >>> ConvPoolLRN_bc01(pt.tensor4("x"), 2, 3, 3, 2, b=Constant((8,), 0.2), W=Normal((8, 3, 7, 7)), poolpad=1,
    ...                  lrn=True, input_shape=(2, 3, 32, 32), printinfo=False).output_shape
    (2, 8, 8, 8)
    """

    def __init__(self, input, convstride, padsize, poolsize, poolstride, b, W=None, filter_shape=None, poolpad=0,
                 mode="max", lrn=False, lib_conv="cudnn", printinfo=True, input_shape=None, output_shape=None):
        conv = Conv(input, convstride, padsize, b, W=W, filter_shape=filter_shape, lib_conv=lib_conv,
                    printinfo=False, input_shape=input_shape)
        self.get_input_shape(input, input_shape)
        self.W, self.b, self.filter_shape = conv.W, conv.b, conv.filter_shape
        self.convstride, self.padsize, self.lib_conv, self.lrn = convstride, padsize, lib_conv, lrn
        self.poolsize, self.poolstride, self.poolpad = poolsize, poolstride, poolpad
        self.channel = self.input_shape[1]
        out, out_shape = conv.output, conv.output_shape
        if poolsize != 1:
            out, out_shape = pool_bc01(out, out_shape, poolsize, poolstride, poolpad, mode)
        if lrn:
            self.lrn_func = CrossChannelNormalization(axis=1)
            out = self.lrn_func(out)
        self.output = out
        self.params = conv.params
        self.weight_type = ["W", "b"]
        self.set_output_shape(out_shape, output_shape)
        self.name = "ConvPoolLRN_bc01"
        if printinfo:
            self.print_shape()
