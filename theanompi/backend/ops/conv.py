"""2-D convolution (cross-correlation, NCHW) as pytensor Ops backed by BLAS.

``conv2d(x, W)`` computes, like ``torch.nn.functional.conv2d`` (no filter flip)::

    y[n, o, i, j] = sum_{c, a, b} W[o, c, a, b] * xpad[n, c, i*sh + a, j*sw + b]

with zero padding and an optional per-channel bias. :class:`Conv2d` is the
forward Op; :class:`Conv2dGradInputs`, :class:`Conv2dGradWeights` and
:class:`Conv2dGradBias` are its gradients, wired in through ``pullback``
(pytensor 3's name for ``Op.grad``; ``grad`` is kept as an alias) so
``pytensor.grad`` works. The gradient Ops are differentiable again because
convolution is bilinear.

Each Op has a C implementation (im2col + BLAS GEMM on chunks of images whose
column buffer stays in cache, see :mod:`._conv_c`) and a NumPy ``perform``
fallback, used when pytensor has no BLAS flags or runs the Python linker.

Example
-------
>>> from theanompi.backend.pytensor_config import configure_pytensor
>>> _ = configure_pytensor()                        # doctest: +SKIP
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi.backend.ops import conv2d
>>> x = pt.tensor4("x"); W = pt.tensor4("W")
>>> y = conv2d(x, W, stride=1, pad=1)
>>> f = pytensor.function([x, W], y)
>>> f(np.ones((2, 3, 8, 8), "float32"), np.ones((4, 3, 3, 3), "float32")).shape
(2, 4, 8, 8)
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from numpy.lib.stride_tricks import as_strided
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply
from pytensor.link.c.op import COp
from pytensor.link.c.params_type import ParamsType
from pytensor.scalar import int32

from theanompi.backend.ops import _conv_c
from theanompi.backend.ops._common import (
    BlasCFlagsMixin,
    as_float_tensor4,
    check_same_dtype,
    check_window_fits,
    normalize_pair,
    out_length,
    static_out_length,
    tensor4_type,
)

__all__ = ["Conv2d", "Conv2dGradBias", "Conv2dGradInputs", "Conv2dGradWeights", "conv2d"]

#: Bytes of im2col buffer the NumPy fallback fills per chunk of images.
_CHUNK_BYTES = 2 << 20


# --------------------------------------------------------------------------- #
# NumPy reference kernels (``perform``)                                       #
# --------------------------------------------------------------------------- #
def _geometry(x_shape, w_shape, stride, pad, op_name):
    """Validate runtime shapes; return (N, C, H, W, O, kh, kw, Ho, Wo)."""
    N, C, H, W = x_shape
    O, Cw, kh, kw = w_shape
    if C != Cw:
        raise ValueError(
            f"{op_name}: x has {C} input channels but W expects {Cw} "
            f"(x.shape={tuple(x_shape)}, W.shape={tuple(w_shape)})"
        )
    check_window_fits(op_name, (H, W), (kh, kw), pad)
    Ho = out_length(H, kh, stride[0], pad[0])
    Wo = out_length(W, kw, stride[1], pad[1])
    return N, C, H, W, O, kh, kw, Ho, Wo


def _check_gy(gy, expected, op_name):
    if tuple(gy.shape) != tuple(expected):
        raise ValueError(
            f"{op_name}: output gradient has shape {tuple(gy.shape)}, expected {tuple(expected)}"
        )


def _padded(x, pad):
    """Zero-padded copy of x (or x itself when pad is (0, 0))."""
    ph, pw = pad
    if ph == 0 and pw == 0:
        return np.ascontiguousarray(x)
    N, C, H, W = x.shape
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=x.dtype)
    xp[:, :, ph : ph + H, pw : pw + W] = x
    return xp


def _windows(xp, kh, kw, stride, Ho, Wo):
    """Read-only view (N, C, kh, kw, Ho, Wo) of the padded input's windows."""
    sN, sC, sH, sW = xp.strides
    shape = (xp.shape[0], xp.shape[1], kh, kw, Ho, Wo)
    strides = (sN, sC, sH, sW, sH * stride[0], sW * stride[1])
    return as_strided(xp, shape, strides, writeable=False)


def _chunk(n_images, bytes_per_image):
    return max(1, min(n_images, _CHUNK_BYTES // max(1, bytes_per_image)))


def conv2d_forward_numpy(x, w, stride, pad, bias=None):
    """NumPy im2col + batched-GEMM forward; the ``perform`` of :class:`Conv2d`."""
    N, C, H, W, O, kh, kw, Ho, Wo = _geometry(x.shape, w.shape, stride, pad, "conv2d")
    if bias is not None and bias.shape != (O,):
        raise ValueError(
            f"conv2d: bias has shape {bias.shape} but W has {O} output channels"
        )
    K, P = C * kh * kw, Ho * Wo
    out = np.empty((N, O, P), dtype=x.dtype)
    windows = _windows(_padded(x, pad), kh, kw, stride, Ho, Wo)
    wm = np.ascontiguousarray(w).reshape(O, K)
    nb = _chunk(N, K * P * x.itemsize)
    cols = np.empty((nb, C, kh, kw, Ho, Wo), dtype=x.dtype)
    for n0 in range(0, N, nb):
        m = min(nb, N - n0)
        np.copyto(cols[:m], windows[n0 : n0 + m])
        np.matmul(wm, cols[:m].reshape(m, K, P), out=out[n0 : n0 + m])
    if bias is not None:
        out += bias[:, None]
    return out.reshape(N, O, Ho, Wo)


def conv2d_grad_weights_numpy(x, w_shape, gy, stride, pad):
    """Gradient of conv2d with respect to W, contracted with ``gy``."""
    N, C, H, W, O, kh, kw, Ho, Wo = _geometry(
        x.shape, w_shape, stride, pad, "conv2d_grad_weights"
    )
    _check_gy(gy, (N, O, Ho, Wo), "conv2d_grad_weights")
    K, P = C * kh * kw, Ho * Wo
    dw = np.zeros((O, K), dtype=x.dtype)
    windows = _windows(_padded(x, pad), kh, kw, stride, Ho, Wo)
    gy3 = np.ascontiguousarray(gy).reshape(N, O, P)
    nb = _chunk(N, K * P * x.itemsize)
    cols = np.empty((nb, C, kh, kw, Ho, Wo), dtype=x.dtype)
    for n0 in range(0, N, nb):
        m = min(nb, N - n0)
        np.copyto(cols[:m], windows[n0 : n0 + m])
        dw += np.matmul(gy3[n0 : n0 + m], cols[:m].reshape(m, K, P).transpose(0, 2, 1)).sum(0)
    return dw.reshape(w_shape)


def conv2d_grad_inputs_numpy(x_shape, w, gy, stride, pad):
    """Gradient of conv2d with respect to x (col2im by strided slice-adds)."""
    N, C, H, W, O, kh, kw, Ho, Wo = _geometry(
        x_shape, w.shape, stride, pad, "conv2d_grad_inputs"
    )
    _check_gy(gy, (N, O, Ho, Wo), "conv2d_grad_inputs")
    (sh, sw), (ph, pw) = stride, pad
    K, P = C * kh * kw, Ho * Wo
    dxp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=w.dtype)
    wt = np.ascontiguousarray(w).reshape(O, K).T
    gy3 = np.ascontiguousarray(gy).reshape(N, O, P)
    nb = _chunk(N, K * P * w.itemsize)
    for n0 in range(0, N, nb):
        m = min(nb, N - n0)
        dcols = np.matmul(wt, gy3[n0 : n0 + m]).reshape(m, C, kh, kw, Ho, Wo)
        block = dxp[n0 : n0 + m]
        for i in range(kh):
            for j in range(kw):
                block[:, :, i : i + sh * (Ho - 1) + 1 : sh, j : j + sw * (Wo - 1) + 1 : sw] += (
                    dcols[:, :, i, j]
                )
    return np.ascontiguousarray(dxp[:, :, ph : ph + H, pw : pw + W])


# --------------------------------------------------------------------------- #
# Ops                                                                         #
# --------------------------------------------------------------------------- #
class _ConvOpBase(BlasCFlagsMixin, COp):
    """Shared parameters, C plumbing and the legacy ``grad`` alias."""

    __props__ = ("stride", "pad")
    # Runtime parameters (not C constants), so every stride/pad shares one compiled module.
    params_type = ParamsType(sh=int32, sw=int32, ph=int32, pw=int32)
    _c_function = ""

    def __init__(self, stride=(1, 1), pad=(0, 0)):
        self.stride = normalize_pair(stride, "stride", minimum=1)
        self.pad = normalize_pair(pad, "pad", minimum=0)

    sh = property(lambda self: self.stride[0])
    sw = property(lambda self: self.stride[1])
    ph = property(lambda self: self.pad[0])
    pw = property(lambda self: self.pad[1])

    def grad(self, inputs, output_grads):
        """Legacy entry point; pytensor 3 calls :meth:`pullback`."""
        return self.pullback(inputs, self.make_node(*inputs).outputs, output_grads)

    def c_support_code(self, **kwargs):
        return _conv_c.support_code()

    def c_compile_args(self, **kwargs):
        return [*super().c_compile_args(**kwargs), "-fopenmp"]  # image chunks over OMP_NUM_THREADS threads

    def c_libraries(self, **kwargs):
        return [*super().c_libraries(**kwargs), "gomp"]

    def c_code_cache_version(self):
        return _conv_c.cache_version()

    def c_code(self, node, name, inputs, outputs, sub):
        if not self.has_blas():
            raise NotImplementedError("no BLAS flags configured; using perform")
        return _conv_c.call_code(self._c_function, inputs, outputs[0], sub["params"], sub["fail"])

    def _make_inputs(self, op_name, **named):
        tensors = {name: as_float_tensor4(v, op_name, name) for name, v in named.items()}
        dtype = check_same_dtype(op_name, **tensors)
        return tensors, dtype

    def _static_checks(self, op_name, x, w):
        xs, ws = x.type.shape, w.type.shape
        if xs[1] is not None and ws[1] is not None and xs[1] != ws[1]:
            raise ValueError(
                f"{op_name}: x has {xs[1]} input channels but W expects {ws[1]} "
                f"(x static shape {xs}, W static shape {ws})"
            )
        check_window_fits(op_name, xs[2:], ws[2:], self.pad)

    def _static_out_shape(self, x, w):
        xs, ws = x.type.shape, w.type.shape
        return (
            xs[0],
            ws[0],
            static_out_length(xs[2], ws[2], self.stride[0], self.pad[0]),
            static_out_length(xs[3], ws[3], self.stride[1], self.pad[1]),
        )


class Conv2d(_ConvOpBase):
    """Forward op: ``Conv2d(stride, pad)(x, W[, b])`` -> NCHW output.

    Example
    -------
    >>> op = Conv2d(stride=2, pad=(1, 0))
    >>> op.stride, op.pad
    ((2, 2), (1, 0))
    """

    _c_function = "tmpi_conv2d_forward"

    def make_node(self, x, W, b=None):
        t, dtype = self._make_inputs("conv2d", x=x, W=W)
        x, W = t["x"], t["W"]
        self._static_checks("conv2d", x, W)
        inputs = [x, W]
        if b is not None:
            inputs.append(self._bias_input(b, W, dtype))
        out = tensor4_type(dtype, self._static_out_shape(x, W))()
        return Apply(self, inputs, [out])

    @staticmethod
    def _bias_input(b, W, dtype):
        b = pt.as_tensor_variable(b)
        if b.ndim != 1:
            raise ValueError(f"conv2d: bias must be a vector, got ndim={b.ndim} (type {b.type})")
        if b.dtype != dtype:
            raise ValueError(
                f"conv2d: inputs must share one dtype (no implicit upcast), got "
                f"x/W={dtype!r}, b={b.dtype!r}"
            )
        nb, no = b.type.shape[0], W.type.shape[0]
        if nb is not None and no is not None and nb != no:
            raise ValueError(f"conv2d: bias has {nb} entries but W has {no} output channels")
        return b

    def c_code(self, node, name, inputs, outputs, sub):
        if len(inputs) == 2:
            inputs = [*inputs, "NULL"]
        return super().c_code(node, name, inputs, outputs, sub)

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = conv2d_forward_numpy(*inputs[:2], self.stride, self.pad, *inputs[2:])

    def infer_shape(self, fgraph, node, input_shapes):
        xs, ws = input_shapes[:2]
        return [
            (
                xs[0],
                ws[0],
                out_length(xs[2], ws[2], self.stride[0], self.pad[0]),
                out_length(xs[3], ws[3], self.stride[1], self.pad[1]),
            )
        ]

    def pullback(self, inputs, outputs, cotangents):
        x, W = inputs[:2]
        (gy,) = cotangents
        grads = [
            Conv2dGradInputs(self.stride, self.pad)(x, W, gy),
            Conv2dGradWeights(self.stride, self.pad)(x, W, gy),
        ]
        if len(inputs) == 3:
            grads.append(Conv2dGradBias()(gy))
        return grads


class Conv2dGradInputs(_ConvOpBase):
    """``Conv2dGradInputs(stride, pad)(x, W, gy)`` -> dL/dx (x supplies only its shape).

    Example
    -------
    >>> Conv2dGradInputs(1, 1).stride
    (1, 1)
    """

    _c_function = "tmpi_conv2d_grad_inputs"

    def make_node(self, x, W, gy):
        t, dtype = self._make_inputs("conv2d_grad_inputs", x=x, W=W, gy=gy)
        x, W, gy = t["x"], t["W"], t["gy"]
        self._static_checks("conv2d_grad_inputs", x, W)
        out = tensor4_type(dtype, x.type.shape)()
        return Apply(self, [x, W, gy], [out])

    def perform(self, node, inputs, output_storage):
        x, w, gy = inputs
        output_storage[0][0] = conv2d_grad_inputs_numpy(x.shape, w, gy, self.stride, self.pad)

    def infer_shape(self, fgraph, node, input_shapes):
        return [tuple(input_shapes[0])]

    def connection_pattern(self, node):
        return [[False], [True], [True]]

    def pullback(self, inputs, outputs, cotangents):
        # dx = A(W) gy is bilinear in (W, gy); <G, dx> = <conv2d(G, W), gy>.
        x, W, gy = inputs
        (g,) = cotangents
        return [
            disconnected_type(),
            Conv2dGradWeights(self.stride, self.pad)(g, W, gy),
            Conv2d(self.stride, self.pad)(g, W),
        ]


class Conv2dGradWeights(_ConvOpBase):
    """``Conv2dGradWeights(stride, pad)(x, W, gy)`` -> dL/dW (W supplies only its shape).

    Example
    -------
    >>> Conv2dGradWeights(pad=1).pad
    (1, 1)
    """

    _c_function = "tmpi_conv2d_grad_weights"

    def make_node(self, x, W, gy):
        t, dtype = self._make_inputs("conv2d_grad_weights", x=x, W=W, gy=gy)
        x, W, gy = t["x"], t["W"], t["gy"]
        self._static_checks("conv2d_grad_weights", x, W)
        out = tensor4_type(dtype, W.type.shape)()
        return Apply(self, [x, W, gy], [out])

    def perform(self, node, inputs, output_storage):
        x, w, gy = inputs
        output_storage[0][0] = conv2d_grad_weights_numpy(x, w.shape, gy, self.stride, self.pad)

    def infer_shape(self, fgraph, node, input_shapes):
        return [tuple(input_shapes[1])]

    def connection_pattern(self, node):
        return [[True], [False], [True]]

    def pullback(self, inputs, outputs, cotangents):
        # dW = B(x) gy is bilinear in (x, gy); <G, dW> = <conv2d(x, G), gy>.
        x, W, gy = inputs
        (g,) = cotangents
        return [
            Conv2dGradInputs(self.stride, self.pad)(x, g, gy),
            disconnected_type(),
            Conv2d(self.stride, self.pad)(x, g),
        ]


class Conv2dGradBias(COp):
    """Gradient of the conv bias: ``Conv2dGradBias()(gy)`` = ``gy.sum(axis=(0, 2, 3))``.

    A dedicated op because pytensor's generic reduction over (0, 2, 3) is an
    order of magnitude slower than this single pass.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> Conv2dGradBias()(pt.tensor4("gy")).ndim
    1
    """

    __props__ = ()

    def make_node(self, gy):
        gy = as_float_tensor4(gy, "conv2d_grad_bias", "gy")
        out = pt.tensor(dtype=gy.dtype, shape=(gy.type.shape[1],))
        return Apply(self, [gy], [out])

    def perform(self, node, inputs, output_storage):
        (gy,) = inputs
        output_storage[0][0] = gy.sum(axis=(0, 2, 3), dtype=np.float64).astype(gy.dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        return [(input_shapes[0][1],)]

    def pullback(self, inputs, outputs, cotangents):
        (gy,) = inputs
        (g,) = cotangents
        return [pt.broadcast_to(g.dimshuffle("x", 0, "x", "x"), gy.shape)]

    def grad(self, inputs, output_grads):
        """Legacy entry point; pytensor 3 calls :meth:`pullback`."""
        return self.pullback(inputs, self.make_node(*inputs).outputs, output_grads)

    def c_support_code(self, **kwargs):
        return _conv_c.BIAS_SUPPORT_CODE

    def c_code_cache_version(self):
        return _conv_c.bias_cache_version()

    def c_code(self, node, name, inputs, outputs, sub):
        (gy,) = inputs
        return f"if (tmpi_conv2d_grad_bias({gy}, &{outputs[0]}) != 0) {{ {sub['fail']} }}\n"


def conv2d(x, W, stride=(1, 1), pad=(0, 0), bias=None):
    """Symbolic 2-D cross-correlation of NCHW ``x`` with OIHW filters ``W``.

    Parameters
    ----------
    x : TensorVariable
        Input batch, shape (N, C, H, W), float32 or float64.
    W : TensorVariable
        Filters, shape (O, C, kh, kw), same dtype as ``x``.
    stride, pad : int or pair of ints
        Step between windows (>= 1) and zero padding on each side (>= 0).
    bias : TensorVariable, optional
        Per-output-channel bias, shape (O,), same dtype; added inside the op
        (cheaper than a separate broadcast add and its reduction gradient).

    Returns
    -------
    TensorVariable
        Shape (N, O, (H + 2*ph - kh)//sh + 1, (W + 2*pw - kw)//sw + 1), dtype of ``x``.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> y = conv2d(pt.tensor4("x"), pt.tensor4("W"), pad=1)
    >>> y.ndim, y.dtype == pt.tensor4("x").dtype
    (4, True)
    """
    op = Conv2d(stride, pad)
    return op(x, W) if bias is None else op(x, W, bias)
