"""2-D max and average pooling (NCHW) as pytensor Ops.

Semantics follow torch (``ceil_mode=False``): the output length is
``(H + 2*pad - pool)//stride + 1``; max pooling pads with -inf, average
pooling with zeros and divides by the full window size
(``count_include_pad=True``). The max-pool gradient goes to the first
maximum of each window in row-major window order.

:class:`Pool2d` is the forward Op and :class:`Pool2dGrad` its gradient; both
have a C implementation and a NumPy ``perform`` fallback.

Example
-------
>>> from theanompi.backend.pytensor_config import configure_pytensor
>>> _ = configure_pytensor()                        # doctest: +SKIP
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi.backend.ops import max_pool2d
>>> x = pt.tensor4("x")
>>> f = pytensor.function([x], max_pool2d(x, 2))
>>> f(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))[0, 0]
array([[ 5.,  7.],
       [13., 15.]], dtype=float32)
"""

from __future__ import annotations

import numpy as np
from pytensor.gradient import disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.link.c.op import COp
from pytensor.link.c.params_type import ParamsType
from pytensor.scalar import int32

from theanompi.backend.ops import _pool_c
from theanompi.backend.ops._common import (
    as_float_tensor4,
    check_same_dtype,
    check_window_fits,
    normalize_pair,
    out_length,
    static_out_length,
    tensor4_type,
)

__all__ = ["Pool2d", "Pool2dGrad", "avg_pool2d", "max_pool2d"]

MODES = ("max", "average")


# --------------------------------------------------------------------------- #
# NumPy kernels (``perform``)                                                 #
# --------------------------------------------------------------------------- #
def _out_hw(shape, pool, stride, pad, op_name):
    check_window_fits(op_name, shape[2:], pool, pad)
    return (
        out_length(shape[2], pool[0], stride[0], pad[0]),
        out_length(shape[3], pool[1], stride[1], pad[1]),
    )


def _padded(x, pad, fill):
    ph, pw = pad
    if ph == 0 and pw == 0:
        return x
    N, C, H, W = x.shape
    xp = np.full((N, C, H + 2 * ph, W + 2 * pw), fill, dtype=x.dtype)
    xp[:, :, ph : ph + H, pw : pw + W] = x
    return xp


def _offsets(pool, stride, out_hw):
    """(k, index) per window offset: index selects that offset of every window."""
    (kh, kw), (sh, sw), (Ho, Wo) = pool, stride, out_hw
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + sh * (Ho - 1) + 1, sh)
            cols = slice(j, j + sw * (Wo - 1) + 1, sw)
            yield i * kw + j, (slice(None), slice(None), rows, cols)


def pool_forward_numpy(x, pool, stride, pad, mode):
    """Max or average pooling of an NCHW array."""
    out_hw = _out_hw(x.shape, pool, stride, pad, f"{mode}_pool2d")
    xp = _padded(x, pad, -np.inf if mode == "max" else 0)
    out = None
    for _, index in _offsets(pool, stride, out_hw):
        window = xp[index]
        if out is None:
            out = window.copy()
        elif mode == "max":
            np.maximum(out, window, out=out)
        else:
            out += window
    if mode == "average":
        out /= np.asarray(pool[0] * pool[1], dtype=x.dtype)
    return np.ascontiguousarray(out)


def pool_grad_numpy(x, gy, pool, stride, pad, mode):
    """Gradient of :func:`pool_forward_numpy` with respect to x, contracted with gy."""
    op_name = f"{mode}_pool2d_grad"
    out_hw = _out_hw(x.shape, pool, stride, pad, op_name)
    expected = (*x.shape[:2], *out_hw)
    if tuple(gy.shape) != expected:
        raise ValueError(f"{op_name}: output gradient has shape {tuple(gy.shape)}, expected {expected}")
    ph, pw = pad
    N, C, H, W = x.shape
    dxp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=x.dtype)
    if mode == "average":
        share = gy / np.asarray(pool[0] * pool[1], dtype=x.dtype)
        for _, index in _offsets(pool, stride, out_hw):
            dxp[index] += share
    else:
        xp = _padded(x, pad, -np.inf)
        best = argbest = None
        for k, index in _offsets(pool, stride, out_hw):
            window = xp[index]
            if best is None:
                best, argbest = window.copy(), np.zeros(window.shape, dtype=np.int32)
            else:
                # strict '>': ties keep the first maximum; NaN wins (as in torch)
                better = (window > best) | np.isnan(window)
                best[better] = window[better]
                argbest[better] = k
        for k, index in _offsets(pool, stride, out_hw):
            dxp[index] += np.where(argbest == k, gy, 0)
    return np.ascontiguousarray(dxp[:, :, ph : ph + H, pw : pw + W])


# --------------------------------------------------------------------------- #
# Ops                                                                         #
# --------------------------------------------------------------------------- #
class _PoolOpBase(COp):
    __props__ = ("pool_size", "stride", "pad", "mode")
    # Runtime parameters (not C constants), so every geometry shares one compiled module.
    params_type = ParamsType(
        kh=int32, kw=int32, sh=int32, sw=int32, ph=int32, pw=int32, is_max=int32
    )
    _c_function = ""

    kh = property(lambda self: self.pool_size[0])
    kw = property(lambda self: self.pool_size[1])
    sh = property(lambda self: self.stride[0])
    sw = property(lambda self: self.stride[1])
    ph = property(lambda self: self.pad[0])
    pw = property(lambda self: self.pad[1])
    is_max = property(lambda self: int(self.mode == "max"))

    def __init__(self, pool_size=(2, 2), stride=None, pad=(0, 0), mode="max"):
        if mode not in MODES:
            raise ValueError(f"pool mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.pool_size = normalize_pair(pool_size, "pool_size", minimum=1)
        self.stride = self.pool_size if stride is None else normalize_pair(stride, "stride", 1)
        self.pad = normalize_pair(pad, "pad", minimum=0)
        for p, k in zip(self.pad, self.pool_size):
            if 2 * p > k:
                raise ValueError(
                    f"pad must be at most half of pool_size, got pad={self.pad} "
                    f"with pool_size={self.pool_size}"
                )

    @property
    def op_name(self):
        return f"{self.mode}_pool2d"

    def grad(self, inputs, output_grads):
        """Legacy entry point; pytensor 3 calls :meth:`pullback`."""
        return self.pullback(inputs, self.make_node(*inputs).outputs, output_grads)

    def c_support_code(self, **kwargs):
        return _pool_c.SUPPORT_CODE

    def c_compile_args(self, **kwargs):
        return ["-fopenmp"]  # planes are shared out over OMP_NUM_THREADS threads

    def c_libraries(self, **kwargs):
        return ["gomp"]

    def c_code_cache_version(self):
        return _pool_c.cache_version()

    def c_code(self, node, name, inputs, outputs, sub):
        return _pool_c.call_code(self._c_function, inputs, outputs[0], sub["params"], sub["fail"])

    def _static_out_shape(self, x):
        xs = x.type.shape
        check_window_fits(self.op_name, xs[2:], self.pool_size, self.pad)
        return (
            xs[0],
            xs[1],
            static_out_length(xs[2], self.pool_size[0], self.stride[0], self.pad[0]),
            static_out_length(xs[3], self.pool_size[1], self.stride[1], self.pad[1]),
        )

    def _out_shape(self, xs):
        return (
            xs[0],
            xs[1],
            out_length(xs[2], self.pool_size[0], self.stride[0], self.pad[0]),
            out_length(xs[3], self.pool_size[1], self.stride[1], self.pad[1]),
        )


class Pool2d(_PoolOpBase):
    """Forward pooling op: ``Pool2d(pool_size, stride, pad, mode)(x)``.

    Example
    -------
    >>> Pool2d((3, 3), stride=2, pad=1).stride
    (2, 2)
    """

    _c_function = "tmpi_pool2d_forward"

    def make_node(self, x):
        x = as_float_tensor4(x, self.op_name, "x")
        out = tensor4_type(x.dtype, self._static_out_shape(x))()
        return Apply(self, [x], [out])

    def perform(self, node, inputs, output_storage):
        (x,) = inputs
        output_storage[0][0] = pool_forward_numpy(
            x, self.pool_size, self.stride, self.pad, self.mode
        )

    def infer_shape(self, fgraph, node, input_shapes):
        return [self._out_shape(input_shapes[0])]

    def pullback(self, inputs, outputs, cotangents):
        (x,) = inputs
        (gy,) = cotangents
        return [Pool2dGrad(self.pool_size, self.stride, self.pad, self.mode)(x, gy)]


class Pool2dGrad(_PoolOpBase):
    """Gradient of :class:`Pool2d`: ``Pool2dGrad(...)(x, gy)`` -> dL/dx.

    For ``mode="average"`` x supplies only its shape.

    Example
    -------
    >>> Pool2dGrad(2, mode="average").mode
    'average'
    """

    _c_function = "tmpi_pool2d_grad"

    def make_node(self, x, gy):
        x = as_float_tensor4(x, f"{self.op_name}_grad", "x")
        gy = as_float_tensor4(gy, f"{self.op_name}_grad", "gy")
        check_same_dtype(f"{self.op_name}_grad", x=x, gy=gy)
        self._static_out_shape(x)
        out = tensor4_type(x.dtype, x.type.shape)()
        return Apply(self, [x, gy], [out])

    def perform(self, node, inputs, output_storage):
        x, gy = inputs
        output_storage[0][0] = pool_grad_numpy(
            x, gy, self.pool_size, self.stride, self.pad, self.mode
        )

    def infer_shape(self, fgraph, node, input_shapes):
        return [tuple(input_shapes[0])]

    def connection_pattern(self, node):
        return [[self.mode == "max"], [True]]

    def pullback(self, inputs, outputs, cotangents):
        x, gy = inputs
        (g,) = cotangents
        if self.mode == "average":
            # Linear in gy: the adjoint of the gradient is the forward pooling.
            forward = Pool2d(self.pool_size, self.stride, self.pad, self.mode)
            return [disconnected_type(), forward(g)]
        return [
            grad_not_implemented(self, 0, x, "second derivative of max pooling"),
            grad_not_implemented(self, 1, gy, "second derivative of max pooling"),
        ]


def max_pool2d(x, pool_size=(2, 2), stride=None, pad=(0, 0)):
    """Max pooling of an NCHW tensor (torch semantics, ``ceil_mode=False``).

    Parameters
    ----------
    x : TensorVariable
        Input, shape (N, C, H, W), float32 or float64.
    pool_size : int or pair of ints
        Window (kh, kw).
    stride : int or pair of ints, optional
        Step between windows; defaults to ``pool_size``.
    pad : int or pair of ints
        Implicit -inf padding per side, at most half the window.

    Returns
    -------
    TensorVariable
        Shape (N, C, (H + 2*ph - kh)//sh + 1, (W + 2*pw - kw)//sw + 1), dtype of ``x``.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> max_pool2d(pt.tensor4("x"), 3, stride=2, pad=1).ndim
    4
    """
    return Pool2d(pool_size, stride, pad, "max")(x)


def avg_pool2d(x, pool_size=(2, 2), stride=None, pad=(0, 0)):
    """Average pooling (zero padding counted in the divisor), otherwise like :func:`max_pool2d`.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> avg_pool2d(pt.tensor4("x")).ndim
    4
    """
    return Pool2d(pool_size, stride, pad, "average")(x)
