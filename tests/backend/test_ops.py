"""Tests for theanompi.backend.ops: conv2d / max_pool2d / avg_pool2d Ops.

Every result is compared with slow, explicit-loop NumPy references; gradients
are also checked by finite differences (``pytensor.gradient.verify_grad``).
Both implementations of each Op are covered: the C code (default mode) and
the NumPy ``perform`` (Python linker).
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.gradient import verify_grad

from theanompi.backend.ops import (
    Conv2d,
    Conv2dGradBias,
    Conv2dGradInputs,
    Conv2dGradWeights,
    Pool2d,
    Pool2dGrad,
    avg_pool2d,
    conv2d,
    max_pool2d,
)

PY_MODE = Mode(linker="py", optimizer="fast_run")
TOL = {"float32": dict(rtol=2e-4, atol=2e-4), "float64": dict(rtol=1e-10, atol=1e-10)}


# --------------------------------------------------------------------------- #
# Explicit-loop references                                                    #
# --------------------------------------------------------------------------- #
def _pad(x, pad, fill=0.0):
    ph, pw = pad
    out = np.full((*x.shape[:2], x.shape[2] + 2 * ph, x.shape[3] + 2 * pw), fill, x.dtype)
    out[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]] = x
    return out


def ref_conv(x, w, stride, pad, bias=None):
    """y[n,o,i,j] = sum(xpad[n, :, window(i,j)] * w[o]) (+ bias[o]), float64."""
    xp = _pad(x.astype(np.float64), pad)
    (sh, sw), (kh, kw) = stride, w.shape[2:]
    Ho, Wo = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    y = np.zeros((x.shape[0], w.shape[0], Ho, Wo))
    for n in range(x.shape[0]):
        for o in range(w.shape[0]):
            for i in range(Ho):
                for j in range(Wo):
                    window = xp[n, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
                    y[n, o, i, j] = np.sum(window * w[o]) + (0 if bias is None else bias[o])
    return y


def ref_conv_grads(x, w, g, stride, pad):
    """(dx, dw, db) of sum(conv(x, w) * g), by the same explicit loops."""
    xp = _pad(x.astype(np.float64), pad)
    dxp = np.zeros_like(xp)
    dw = np.zeros(w.shape)
    (sh, sw), (kh, kw) = stride, w.shape[2:]
    for n in range(g.shape[0]):
        for o in range(g.shape[1]):
            for i in range(g.shape[2]):
                for j in range(g.shape[3]):
                    win = (n, slice(None), slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw))
                    dw[o] += g[n, o, i, j] * xp[win]
                    dxp[win] += g[n, o, i, j] * w[o]
    ph, pw = pad
    dx = dxp[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]
    return dx, dw, g.sum(axis=(0, 2, 3))


def ref_pool(x, pool, stride, pad, mode):
    """Max or average (zero padding counted) pooling, float64."""
    xp = _pad(x.astype(np.float64), pad, -np.inf if mode == "max" else 0.0)
    (kh, kw), (sh, sw) = pool, stride
    Ho, Wo = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    y = np.zeros((*x.shape[:2], Ho, Wo))
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            for i in range(Ho):
                for j in range(Wo):
                    window = xp[n, c, i * sh : i * sh + kh, j * sw : j * sw + kw]
                    y[n, c, i, j] = window.max() if mode == "max" else window.mean()
    return y


def ref_pool_grad(x, g, pool, stride, pad, mode):
    xp = _pad(x.astype(np.float64), pad, -np.inf if mode == "max" else 0.0)
    dxp = np.zeros_like(xp)
    (kh, kw), (sh, sw) = pool, stride
    for n in range(g.shape[0]):
        for c in range(g.shape[1]):
            for i in range(g.shape[2]):
                for j in range(g.shape[3]):
                    rows, cols = slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw)
                    if mode == "max":
                        a, b = np.unravel_index(np.argmax(xp[n, c, rows, cols]), (kh, kw))
                        dxp[n, c, i * sh + a, j * sw + b] += g[n, c, i, j]
                    else:
                        dxp[n, c, rows, cols] += g[n, c, i, j] / (kh * kw)
    ph, pw = pad
    return dxp[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]


# --------------------------------------------------------------------------- #
# Convolution                                                                 #
# --------------------------------------------------------------------------- #
# (x shape, W shape, stride, pad)
CONV_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 2), (2, 1), (1, 2)),   # odd sizes, asymmetric everything
    ((3, 2, 8, 9), (5, 2, 3, 3), (2, 2), (1, 1)),
    ((2, 4, 5, 6), (3, 4, 1, 1), (1, 1), (0, 0)),   # pointwise fast path
    ((2, 3, 9, 7), (2, 3, 4, 3), (3, 2), (2, 0)),   # stride > 1, kernel 4
    ((1, 1, 5, 5), (2, 1, 5, 5), (1, 1), (0, 0)),   # kernel == input
    ((1, 2, 3, 4), (3, 2, 3, 3), (1, 1), (3, 3)),   # padding wider than the kernel reach
    # C code chunks images so that each column buffer is ~1 MiB: 36*1600*itemsize
    # bytes per image gives chunks of 4+1 (float32) and 2+2+1 (float64) images.
    ((5, 4, 40, 40), (3, 4, 3, 3), (1, 1), (1, 1)),
    # several chunks (2 float32, 6 float64): with OMP_NUM_THREADS >= 2 threads share them out,
    # each with its own buffers (and its own weight-gradient sum)
    ((6, 32, 24, 24), (5, 32, 3, 3), (2, 1), (1, 0)),
    # float32: outputs of a whole number of vectors, so the im2col GEMMs of the forward pass and the input
    # gradient run on the vector kernel (conv2d_vec.h), not BLAS
    ((3, 4, 16, 16), (8, 4, 3, 3), (2, 2), (1, 1)),
]
CONV_IDS = ["odd", "stride2", "pointwise", "k4s3", "full", "widepad", "chunks", "chunks-threads", "vector-gemm"]


def _conv_graph(dtype, stride, pad, with_bias):
    x, w, g = pt.tensor4("x", dtype=dtype), pt.tensor4("w", dtype=dtype), pt.tensor4("g", dtype=dtype)
    b = pt.vector("b", dtype=dtype)
    y = conv2d(x, w, stride=stride, pad=pad, bias=b if with_bias else None)
    wrt = [x, w, b] if with_bias else [x, w]
    grads = pytensor.grad((y * g).sum(), wrt)
    return [x, w, b, g] if with_bias else [x, w, g], [y, *grads]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CONV_CASES, ids=CONV_IDS)
def test_conv2d_forward_and_grads_match_reference(case, dtype):
    xs, ws, stride, pad = case
    rng = np.random.default_rng(sum(xs) + sum(ws))
    with_bias = ws[2] != 4  # exercise both signatures
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    y_ref = ref_conv(x, w, stride, pad, b if with_bias else None)
    g = rng.standard_normal(y_ref.shape).astype(dtype)
    dx_ref, dw_ref, db_ref = ref_conv_grads(x, w, g, stride, pad)

    inputs, outputs = _conv_graph(dtype, stride, pad, with_bias)
    f = pytensor.function(inputs, outputs)
    args = [x, w, b, g] if with_bias else [x, w, g]
    got = f(*args)
    expected = [y_ref, dx_ref, dw_ref] + ([db_ref] if with_bias else [])
    for name, value, ref in zip(["y", "dx", "dw", "db"], got, expected):
        assert value.dtype == dtype, name
        np.testing.assert_allclose(value, ref, **TOL[dtype], err_msg=name)


@pytest.mark.parametrize("case", CONV_CASES[:4], ids=CONV_IDS[:4])
def test_conv2d_numpy_perform_matches_reference(case):
    """The Python-linker fallback (``perform``) of all four conv ops."""
    xs, ws, stride, pad = case
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    b = rng.standard_normal(ws[0])
    y_ref = ref_conv(x, w, stride, pad, b)
    g = rng.standard_normal(y_ref.shape)
    inputs, outputs = _conv_graph("float64", stride, pad, with_bias=True)
    got = pytensor.function(inputs, outputs, mode=PY_MODE)(x, w, b, g)
    for value, ref in zip(got, [y_ref, *ref_conv_grads(x, w, g, stride, pad)]):
        np.testing.assert_allclose(value, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("stride, pad", [((1, 1), (1, 1)), ((2, 1), (0, 2))])
def test_conv2d_verify_grad(stride, pad):
    rng = np.random.default_rng(7)
    x, w, b = rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((3, 2, 3, 2)), rng.standard_normal(3)
    verify_grad(lambda x_, w_, b_: conv2d(x_, w_, stride, pad, bias=b_), [x, w, b], rng=rng)


def test_conv2d_grad_ops_verify_grad():
    """Second order: the gradient ops are themselves differentiable (bilinear)."""
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((3, 2, 3, 2))
    gy = rng.standard_normal((2, 3, 3, 5))  # conv output shape for stride (2, 1), pad (1, 1)
    s, p = (2, 1), (1, 1)
    verify_grad(lambda w_, g_: Conv2dGradInputs(s, p)(pt.constant(x), w_, g_), [w, gy], rng=rng)
    verify_grad(lambda x_, g_: Conv2dGradWeights(s, p)(x_, pt.constant(w), g_), [x, gy], rng=rng)
    verify_grad(lambda g_: Conv2dGradBias()(g_), [gy], rng=rng)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv2d_dtype_is_preserved_without_upcast(dtype):
    x, w, b = pt.tensor4(dtype=dtype), pt.tensor4(dtype=dtype), pt.vector(dtype=dtype)
    y = conv2d(x, w, pad=1, bias=b)
    grads = pytensor.grad(y.sum(), [x, w, b])
    assert [v.dtype for v in (y, *grads)] == [dtype] * 4
    f = pytensor.function([x, w, b], [y, *grads])
    # no node in the compiled graph computes in a wider float type
    for node in f.maker.fgraph.apply_nodes:
        assert all(out.dtype != "float64" or dtype == "float64" for out in node.outputs), node
    vals = f(np.ones((1, 2, 4, 4), dtype), np.ones((3, 2, 3, 3), dtype), np.ones(3, dtype))
    assert [v.dtype for v in vals] == [dtype] * 4


def test_conv2d_infer_shape_needs_no_computation():
    x, w = pt.tensor4("x"), pt.tensor4("w")
    y = conv2d(x, w, stride=(2, 3), pad=(1, 0))
    gx, gw = pytensor.grad(y.sum(), [x, w])
    f = pytensor.function([x, w], [y.shape, gx.shape, gw.shape])
    ops = {type(node.op) for node in f.maker.fgraph.apply_nodes}
    assert not ops & {Conv2d, Conv2dGradInputs, Conv2dGradWeights}, ops
    xv, wv = np.zeros((2, 3, 11, 8), "float32"), np.zeros((5, 3, 3, 2), "float32")
    ys, gxs, gws = f(xv, wv)
    assert tuple(ys) == (2, 5, 6, 3)  # (11 + 2 - 3)//2 + 1, (8 - 2)//3 + 1
    assert tuple(gxs) == xv.shape and tuple(gws) == wv.shape


def test_conv2d_static_shape():
    x = pt.tensor4("x", shape=(8, 3, 32, 32))
    w = pt.tensor4("w", shape=(16, 3, 5, 5))
    assert conv2d(x, w, stride=2, pad=2).type.shape == (8, 16, 16, 16)
    assert conv2d(x, pt.tensor4("w")).type.shape == (8, None, None, None)
    gx, gw = pytensor.grad(conv2d(x, w).sum(), [x, w])
    assert gx.type.shape == x.type.shape and gw.type.shape == w.type.shape


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: conv2d(pt.tensor3(), pt.tensor4()), "ndim=3"),
        (lambda: conv2d(pt.tensor4(), pt.matrix()), "ndim=2"),
        (lambda: conv2d(pt.tensor4(dtype="int32"), pt.tensor4(dtype="int32")), "'int32'"),
        (lambda: conv2d(pt.tensor4(dtype="float32"), pt.tensor4(dtype="float64")), "'float64'"),
        (lambda: conv2d(pt.tensor4(shape=(1, 3, 8, 8)), pt.tensor4(shape=(4, 2, 3, 3))),
         "3 input channels but W expects 2"),
        (lambda: conv2d(pt.tensor4(shape=(1, 3, 4, 4)), pt.tensor4(shape=(2, 3, 7, 3))), "window 7"),
        (lambda: conv2d(pt.tensor4(), pt.tensor4(), stride=0), "stride must be >= 1"),
        (lambda: conv2d(pt.tensor4(), pt.tensor4(), stride=(1, 2, 3)), "(1, 2, 3)"),
        (lambda: conv2d(pt.tensor4(), pt.tensor4(), pad=(-1, 0)), "(-1, 0)"),
        (lambda: conv2d(pt.tensor4(), pt.tensor4(), pad=1.5), "1.5"),
        (lambda: conv2d(pt.tensor4(), pt.tensor4(shape=(4, 3, 3, 3)), bias=pt.vector(shape=(5,))),
         "bias has 5 entries"),
    ],
    ids=["x-ndim", "w-ndim", "int", "mixed-dtype", "channels", "window", "stride0", "stride3", "pad-neg", "pad-float",
         "bias"],
)
def test_conv2d_bad_inputs_raise_value_error(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert message in str(err.value)


@pytest.mark.parametrize("mode", [None, PY_MODE], ids=["c", "python"])
def test_conv2d_runtime_shape_errors(mode):
    x, w = pt.tensor4("x"), pt.tensor4("w")
    f = pytensor.function([x, w], conv2d(x, w, pad=1), mode=mode)
    with pytest.raises(ValueError, match=r"3 input channels but W expects 2"):
        f(np.zeros((1, 3, 5, 5), "float32"), np.zeros((4, 2, 3, 3), "float32"))
    with pytest.raises(ValueError, match=r"larger than the padded input"):
        f(np.zeros((1, 2, 2, 5), "float32"), np.zeros((4, 2, 5, 3), "float32"))


# --------------------------------------------------------------------------- #
# Convolution: the Winograd path (float32, 3x3, stride 1, pad <= 2, >= 8 channels) #
# --------------------------------------------------------------------------- #
# (x shape, W shape, stride, pad, with bias): every shape class the op routes to Winograd: F(4x4, 3x3) for
# stride 1; four phases and F(4x4, 2x2) for stride 2 (forward and weight gradient; the input gradient stays on im2col)
WINOGRAD_CASES = [
    ((2, 16, 8, 8), (16, 16, 3, 3), 1, (1, 1), True),     # whole 4x4 tiles, one block of 16 channels
    ((2, 8, 7, 9), (12, 8, 3, 3), 1, (1, 1), True),       # partial tiles; channels padded to the vector width
    ((2, 9, 9, 6), (10, 9, 3, 3), 1, (0, 2), False),      # no padding in one dimension, 2 in the other
    ((2, 40, 6, 5), (33, 40, 3, 3), 1, (1, 1), True),     # several channel blocks and a remainder
    ((3, 16, 32, 32), (16, 16, 3, 3), 1, (1, 1), False),  # one image per chunk: chunks shared out over threads
    ((24, 16, 8, 8), (16, 16, 3, 3), 1, (1, 1), False),   # many images per chunk, a short last chunk
    ((2, 16, 16, 16), (32, 16, 3, 3), 2, (1, 1), True),   # stride 2 as in ResNet: phases in vector blocks
    ((2, 8, 7, 9), (12, 8, 3, 3), 2, (0, 2), False),      # stride 2, odd sizes: phases one value at a time
    ((3, 32, 10, 12), (16, 32, 3, 3), 2, (2, 1), True),   # stride 2, padding 2 and 1, rows past a vector
]
WINOGRAD_IDS = ["tiles", "partial-tiles", "pad0-pad2", "channel-blocks", "chunks-threads", "images-per-chunk",
                "s2", "s2-odd", "s2-pad2"]
#: Winograd's float32 error, relative to the largest value: measured 2e-6..8e-6 on these cases (the direct sum
#: of the im2col path: 2e-7..1e-6)
WINOGRAD_RTOL = 5e-5


def _relative_error(value, ref):
    return float(np.abs(value - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=WINOGRAD_IDS)
def test_conv2d_winograd_matches_reference_and_im2col(case, monkeypatch):
    xs, ws, stride, pad, with_bias = case
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype("float32")
    w = (rng.standard_normal(ws) / np.sqrt(9 * ws[1])).astype("float32")
    b = rng.standard_normal(ws[0]).astype("float32")
    y_ref = ref_conv(x, w, (stride, stride), pad, b if with_bias else None)
    g = rng.standard_normal(y_ref.shape).astype("float32")
    expected = [y_ref, *ref_conv_grads(x, w, g, (stride, stride), pad)[:2]]

    inputs, outputs = _conv_graph("float32", (stride, stride), pad, with_bias)
    f = pytensor.function(inputs, outputs[:3])
    args = [x, w, b, g] if with_bias else [x, w, g]
    winograd = f(*args)
    monkeypatch.setenv("THEANOMPI_CONV_ALGO", "im2col")
    im2col = f(*args)
    for name, value, old, ref in zip(["y", "dx", "dw"], winograd, im2col, expected):
        assert value.dtype == "float32", name
        assert _relative_error(value, ref) < WINOGRAD_RTOL, name
        assert _relative_error(value, old) < WINOGRAD_RTOL, name
        if stride == 1 or name != "dx":
            # different arithmetic: equal bits would mean the Winograd path never ran
            assert not np.array_equal(value, old), name


@pytest.mark.parametrize(
    "dtype, xs, ws, stride",
    [("float64", (2, 16, 8, 8), (16, 16, 3, 3), 1),   # float64 stays on im2col
     ("float32", (2, 16, 9, 9), (16, 16, 3, 3), 3),   # so does stride 3
     ("float32", (2, 4, 8, 8), (16, 4, 3, 3), 1),     # and a layer of fewer than 8 channels
     ("float32", (2, 16, 8, 8), (16, 16, 5, 5), 1)],  # and a 5x5 filter
    ids=["float64", "stride3", "thin", "5x5"],
)
def test_conv2d_shapes_outside_winograd_stay_on_im2col(dtype, xs, ws, stride, monkeypatch):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    inputs, outputs = _conv_graph(dtype, (stride, stride), (1, 1), with_bias=False)
    f = pytensor.function(inputs, outputs)
    out = [(size + 2 - k) // stride + 1 for size, k in zip(xs[2:], ws[2:])]
    g = rng.standard_normal((xs[0], ws[0], *out)).astype(dtype)
    auto = f(x, w, g)
    monkeypatch.setenv("THEANOMPI_CONV_ALGO", "im2col")
    for value, old in zip(auto, f(x, w, g)):
        np.testing.assert_array_equal(value, old)


# The convolution is linear in each single input value, so a finite difference with a large step is exact but for
# rounding; the default float32 step (3e-4) drowns the difference in the forward pass's rounding noise.
LINEAR_EPS = 1.0


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_winograd_verify_grad(stride):
    """Finite differences in float32 through the Winograd forward, input and weight gradients."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 8, 5, 6)).astype("float32")
    w = (rng.standard_normal((8, 8, 3, 3)) / 6).astype("float32")
    b = rng.standard_normal(8).astype("float32")
    verify_grad(lambda x_, w_, b_: conv2d(x_, w_, stride, 1, bias=b_), [x, w, b], rng=rng, eps=LINEAR_EPS)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_winograd_grad_ops_verify_grad(stride):
    """Second order through the Winograd path: the gradient ops' own gradients (all 3x3)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 8, 5, 6)).astype("float32")
    w = (rng.standard_normal((8, 8, 3, 3)) / 6).astype("float32")
    gy = rng.standard_normal((2, 8, 4 // stride + 1, 5 // stride + 1)).astype("float32")
    s = (stride, stride)
    verify_grad(lambda w_, g_: Conv2dGradInputs(s, 1)(pt.constant(x), w_, g_), [w, gy], rng=rng, eps=LINEAR_EPS)
    verify_grad(lambda x_, g_: Conv2dGradWeights(s, 1)(x_, pt.constant(w), g_), [x, gy], rng=rng, eps=LINEAR_EPS)


def test_conv2d_bad_algorithm_setting_is_a_value_error(monkeypatch):
    x, w = pt.tensor4("x", dtype="float32"), pt.tensor4("w", dtype="float32")
    f = pytensor.function([x, w], conv2d(x, w, pad=1))
    monkeypatch.setenv("THEANOMPI_CONV_ALGO", "fastest")
    with pytest.raises(ValueError, match=r"THEANOMPI_CONV_ALGO must be 'auto' or 'im2col', got 'fastest'"):
        f(np.zeros((1, 8, 4, 4), "float32"), np.zeros((8, 8, 3, 3), "float32"))
    monkeypatch.setenv("THEANOMPI_CONV_ALGO", "auto")
    assert f(np.ones((1, 8, 4, 4), "float32"), np.ones((8, 8, 3, 3), "float32"))[0, 0, 1, 1] == 72


# --------------------------------------------------------------------------- #
# Pooling                                                                     #
# --------------------------------------------------------------------------- #
# (x shape, pool, stride, pad)
POOL_CASES = [
    ((2, 3, 7, 6), (2, 2), None, (0, 0)),    # default stride, odd size: floor drops a row
    ((1, 2, 8, 7), (3, 3), (2, 2), (1, 1)),  # overlapping + padding
    ((2, 1, 5, 7), (2, 3), (1, 2), (1, 1)),  # asymmetric
    ((1, 2, 5, 5), (2, 2), (1, 1), (0, 0)),  # overlapping, unpadded
    ((1, 2, 7, 8), (2, 2), (3, 3), (0, 0)),  # gaps between windows
]
POOL_IDS = ["default", "overlap-pad", "asym", "overlap", "gaps"]


def _pool_fn(mode, pool, stride, pad, dtype, linker_mode=None):
    x, g = pt.tensor4("x", dtype=dtype), pt.tensor4("g", dtype=dtype)
    pool_fn = max_pool2d if mode == "max" else avg_pool2d
    y = pool_fn(x, pool, stride, pad)
    return pytensor.function([x, g], [y, pytensor.grad((y * g).sum(), x)], mode=linker_mode)


@pytest.mark.parametrize("linker", ["c", "python"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_pool_forward_and_grad_match_reference(case, mode, dtype, linker):
    xs, pool, stride, pad = case
    rng = np.random.default_rng(3)
    # distinct values: no ties here (ties have their own test)
    x = rng.permutation(np.prod(xs)).reshape(xs).astype(dtype) - 20
    f = _pool_fn(mode, pool, stride, pad, dtype, PY_MODE if linker == "python" else None)
    y_ref = ref_pool(x, pool, stride or pool, pad, mode)
    g = rng.standard_normal(y_ref.shape).astype(dtype)
    y, dx = f(x, g)
    assert y.dtype == dx.dtype == dtype
    np.testing.assert_allclose(y, y_ref, **TOL[dtype])
    np.testing.assert_allclose(dx, ref_pool_grad(x, g, pool, stride or pool, pad, mode), **TOL[dtype])


@pytest.mark.parametrize("linker", ["c", "python"])
@pytest.mark.parametrize("case", POOL_CASES[:2] + POOL_CASES[3:4], ids=["default", "overlap-pad", "overlap"])
def test_max_pool_ties_route_gradient_to_first_maximum(case, linker):
    xs, pool, stride, pad = case
    x = np.floor(np.random.default_rng(4).uniform(0, 2, xs))  # many ties (values 0 and 1)
    f = _pool_fn("max", pool, stride, pad, "float64", PY_MODE if linker == "python" else None)
    g = np.random.default_rng(5).standard_normal(ref_pool(x, pool, stride or pool, pad, "max").shape)
    np.testing.assert_allclose(f(x, g)[1], ref_pool_grad(x, g, pool, stride or pool, pad, "max"))


@pytest.mark.parametrize("linker", ["c", "python"])
def test_max_pool_constant_input_gradient_goes_to_window_corner(linker):
    f = _pool_fn("max", 2, None, 0, "float64", PY_MODE if linker == "python" else None)
    dx = f(np.ones((1, 1, 4, 5)), np.ones((1, 1, 2, 2)))[1]
    expected = [[1, 0, 1, 0, 0], [0, 0, 0, 0, 0], [1, 0, 1, 0, 0], [0, 0, 0, 0, 0]]
    np.testing.assert_array_equal(dx[0, 0], expected)


@pytest.mark.parametrize("linker", ["c", "python"])
@pytest.mark.parametrize("case", [((2, 3, 7, 6), 2, None, 0), ((1, 2, 8, 7), 3, 2, 1)], ids=["2x2", "overlap-pad"])
def test_max_pool_nan_wins_its_window_like_torch(case, linker):
    xs, pool, stride, pad = case
    rng = np.random.default_rng(9)
    x = rng.standard_normal(xs)
    x.flat[rng.choice(x.size, size=x.size // 5, replace=False)] = np.nan
    f = _pool_fn("max", pool, stride, pad, "float64", PY_MODE if linker == "python" else None)
    y_ref = ref_pool(x, (pool, pool), (stride or pool,) * 2, (pad, pad), "max")
    g = rng.standard_normal(y_ref.shape)
    y, dx = f(x, g)
    np.testing.assert_array_equal(y, y_ref)  # NaN positions included
    # ref_pool_grad's argmax picks a window's first NaN; torch (and we) the last one
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = torch.nn.functional.max_pool2d(xt, pool, stride, pad)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(dx, xt.grad.numpy())


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("case", [((3, 16, 33, 35), 2, None, 0), ((2, 16, 34, 32), 3, 2, 1)], ids=["2x2-odd", "3x3"])
def test_pool_large_input_shared_over_threads_matches_reference(case, mode):
    """Inputs above the C code's OpenMP threshold (32768 values): planes split over threads."""
    xs, pool, stride, pad = case
    rng = np.random.default_rng(10)
    x = (rng.permutation(np.prod(xs)).reshape(xs) / 7.0).astype("float32")
    f = _pool_fn(mode, pool, stride, pad, "float32")
    args = ((pool, pool), (stride or pool,) * 2, (pad, pad), mode)
    g = rng.standard_normal(ref_pool(x, *args).shape).astype("float32")
    y, dx = f(x, g)
    np.testing.assert_allclose(y, ref_pool(x, *args), **TOL["float32"])
    np.testing.assert_allclose(dx, ref_pool_grad(x, g, *args), **TOL["float32"])


def test_max_pool_2x2_verify_grad():
    rng = np.random.default_rng(11)
    x = rng.permutation(2 * 2 * 7 * 5).reshape(2, 2, 7, 5) / 7.0  # odd sizes: a row and a column left out
    verify_grad(lambda x_: max_pool2d(x_, 2), [x], rng=rng)


@pytest.mark.parametrize("mode", ["max", "average"])
def test_pool_verify_grad(mode):
    rng = np.random.default_rng(6)
    x = rng.permutation(2 * 2 * 6 * 5).reshape(2, 2, 6, 5) / 7.0  # spacing >> eps: no ties
    pool_fn = max_pool2d if mode == "max" else avg_pool2d
    verify_grad(lambda x_: pool_fn(x_, (3, 2), (2, 1), (1, 1)), [x], rng=rng)


def test_pool_infer_shape_and_static_shape():
    x = pt.tensor4("x")
    y = max_pool2d(x, 3, stride=2, pad=1)
    f = pytensor.function([x], [y.shape, pytensor.grad(y.sum(), x).shape])
    assert not {type(n.op) for n in f.maker.fgraph.apply_nodes} & {Pool2d, Pool2dGrad}
    ys, gs = f(np.zeros((2, 3, 9, 8), "float32"))
    assert tuple(ys) == (2, 3, 5, 4) and tuple(gs) == (2, 3, 9, 8)
    assert avg_pool2d(pt.tensor4(shape=(4, 3, 7, 6))).type.shape == (4, 3, 3, 3)
    assert max_pool2d(pt.tensor4(dtype="float32")).dtype == "float32"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: max_pool2d(pt.matrix()), "ndim=2"),
        (lambda: max_pool2d(pt.tensor4(dtype="int64")), "'int64'"),
        (lambda: max_pool2d(pt.tensor4(), pool_size=0), "pool_size must be >= 1"),
        (lambda: max_pool2d(pt.tensor4(), 2, stride=(0, 1)), "(0, 1)"),
        (lambda: max_pool2d(pt.tensor4(), 2, pad=2), "at most half of pool_size"),
        (lambda: avg_pool2d(pt.tensor4(shape=(1, 1, 3, 3)), 5), "window 5"),
        (lambda: Pool2d(2, mode="min"), "'min'"),
    ],
    ids=["ndim", "int", "pool0", "stride0", "pad", "window", "mode"],
)
def test_pool_bad_inputs_raise_value_error(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert message in str(err.value)


def test_pool_runtime_window_error():
    x = pt.tensor4("x")
    f = pytensor.function([x], max_pool2d(x, 3))
    with pytest.raises(ValueError, match=r"larger than the padded input"):
        f(np.zeros((1, 1, 2, 5), "float32"))


# --------------------------------------------------------------------------- #
# JAX backend                                                                 #
# --------------------------------------------------------------------------- #
def test_jax_dispatch_registration_is_guarded():
    from theanompi.backend.ops import jax_dispatch

    try:
        import jax  # noqa: F401
    except ImportError:
        assert jax_dispatch.register() is False
    else:
        assert jax_dispatch.register() is True


def test_jax_dispatch_matches_c_backend():
    pytest.importorskip("jax")
    from theanompi.backend.ops import jax_dispatch

    assert jax_dispatch.register()
    rng = np.random.default_rng(9)
    x, w, b = pt.tensor4("x"), pt.tensor4("w"), pt.vector("b")
    h = conv2d(x, w, stride=(1, 2), pad=1, bias=b)
    loss = (max_pool2d(h, 2) ** 2).sum() + (avg_pool2d(h, 3, 2, 1) ** 2).sum()
    outputs = [h, *pytensor.grad(loss, [x, w, b])]
    args = [
        rng.standard_normal((2, 3, 8, 9)).astype(x.dtype),
        rng.standard_normal((4, 3, 3, 3)).astype(x.dtype),
        rng.standard_normal(4).astype(x.dtype),
    ]
    expected = pytensor.function([x, w, b], outputs)(*args)
    got = pytensor.function([x, w, b], outputs, mode="JAX")(*args)
    for value, ref in zip(got, expected):
        np.testing.assert_allclose(np.asarray(value), ref, rtol=1e-3, atol=1e-3)


def test_softmax_and_log_softmax_compile_inline_and_equal_pytensors_own_ops():
    """The rewrite leaves no Python-run OpFromGraph node and computes what pytensor's ops do (values and grads)."""
    from pytensor.compile.mode import get_mode

    from theanompi.backend.ops.softmax_inline import TAG

    x = pt.matrix("x")
    y = pt.special.log_softmax(x, axis=1)
    outputs = [y, pt.special.softmax(x, axis=1), pytensor.grad((y * pt.arange(5)).sum(), x)]
    inlined = pytensor.function([x], outputs)
    kept = pytensor.function([x], outputs, mode=get_mode(None).excluding(TAG))
    names = [{type(n.op).__name__ for n in f.maker.fgraph.toposort()} for f in (inlined, kept)]
    assert not names[0] & {"Softmax", "LogSoftmax"} and names[1] & {"Softmax", "LogSoftmax"}
    data = np.random.default_rng(0).normal(scale=30, size=(4, 5)).astype(x.dtype)  # large: the max shift matters
    for a, b in zip(inlined(data), kept(data)):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
