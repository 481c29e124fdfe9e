"""theanompi.backend.ops.conv_nd: 1-, 2- and 3-D convolutions with stride, padding, dilation and groups, and the
transposed convolution, against an explicit-loop NumPy reference; gradients by finite differences."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad

from theanompi.backend.ops.conv_nd import conv_nd, conv_nd_transpose, dilate_filters


def numpy_conv(x, W, stride, pad, dilation, groups):
    """Cross-correlation by explicit loops over output positions (the reference)."""
    n = x.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    per_in, per_out = x.shape[1] // groups, W.shape[0] // groups
    taps = [(k - 1) * d + 1 for k, d in zip(W.shape[2:], dilation)]
    sizes = [(x.shape[2 + i] - taps[i]) // stride[i] + 1 for i in range(n)]
    out = np.zeros((x.shape[0], W.shape[0], *sizes))
    for o in range(W.shape[0]):
        g = o // per_out
        for pos in np.ndindex(*sizes):
            window = tuple(slice(pos[i] * stride[i], pos[i] * stride[i] + taps[i], dilation[i]) for i in range(n))
            patch = x[(slice(None), slice(g * per_in, (g + 1) * per_in)) + window]
            out[(slice(None), o) + pos] = (patch * W[o]).reshape(x.shape[0], -1).sum(axis=1)
    return out


@pytest.mark.parametrize("n, stride, pad, dilation, groups", [
    (1, (2,), (1,), (2,), 2), (2, (1, 2), (1, 0), (2, 1), 1), (3, (2, 1, 1), (0, 1, 1), (1, 1, 2), 2),
])
def test_conv_nd_and_its_transpose_match_numpy(n, stride, pad, dilation, groups):
    rng = np.random.default_rng(n)
    x = rng.normal(size=(2, 4) + (6,) * n)
    W = rng.normal(size=(4, 4 // groups) + (3,) * n)
    xv = pt.tensor(shape=(None,) * (n + 2), dtype="float64")
    Wv = pytensor.shared(W, shape=W.shape)
    want = numpy_conv(x, W, stride, pad, dilation, groups)
    np.testing.assert_allclose(conv_nd(xv, Wv, stride, pad, dilation, groups).eval({xv: x}), want, atol=1e-10)
    gy = rng.normal(size=want.shape)
    yv = pt.tensor(shape=(None,) * (n + 2), dtype="float64")
    back = conv_nd_transpose(yv, Wv, x.shape, stride, pad, dilation, groups).eval({yv: gy})
    np.testing.assert_allclose((want * gy).sum(), (x * back).sum())  # the adjoint: <conv(x), g> = <x, conv^T(g)>


def test_conv_nd_float32_and_mixed_dtypes():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 9)).astype("float32")
    W = rng.normal(size=(4, 3, 2)).astype("float32")
    got = conv_nd(pt.as_tensor_variable(x), W, stride=2, pad=1).eval()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, numpy_conv(x, W, (2,), (1,), (1,), 1), rtol=1e-5, atol=1e-5)
    assert conv_nd(pt.as_tensor_variable(x), W.astype("float64")).dtype == "float64"  # a mix is upcast


@pytest.mark.parametrize("n", [1, 3])
def test_conv_nd_gradients(n):
    rng = np.random.default_rng(10 + n)
    x = rng.normal(size=(1, 2) + (4,) * n)
    W = rng.normal(size=(2, 1) + (2,) * n)

    def conv(x, W):
        return conv_nd(x, pt.specify_shape(W, W.type.shape if n != 3 else (None, None, 2, None, None)),
                       stride=1, pad=1, dilation=2, groups=2)

    with pytensor.config.change_flags(floatX="float64"):
        verify_grad(conv, [x, W], rng=rng)


def test_dilate_filters_and_errors():
    W = np.arange(4.0).reshape(1, 1, 2, 2)
    got = dilate_filters(pt.as_tensor_variable(W), (2, 3)).eval()
    want = np.zeros((1, 1, 3, 4))
    want[0, 0, ::2, ::3] = W[0, 0]
    np.testing.assert_array_equal(got, want)
    x = pt.tensor3("x")
    with pytest.raises(ValueError, match="x and W must both have 3, 4 or 5 dimensions"):
        conv_nd(x, np.ones((1, 1, 2, 2)))
    with pytest.raises(ValueError, match="stride must be >= 1"):
        conv_nd(x, np.ones((1, 1, 2)), stride=0)
    with pytest.raises(ValueError, match="groups must be a positive int, got 0"):
        conv_nd(x, np.ones((1, 1, 2)), groups=0)
    with pytest.raises(ValueError, match="3-D filters need a static depth"):
        conv_nd(pt.tensor5("x"), pt.tensor5("W"))
