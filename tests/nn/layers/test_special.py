"""lasagne.layers.special: bias and scale layers, standardize, InverseLayer, PReLU, RReLU, and the spatial
transformers (affine and thin plate spline) against NumPy references."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad

import theanompi.nn as L

FX = pytensor.config.floatX


def test_bias_scale_and_standardize_share_over_the_given_axes():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4)).astype(FX)
    bias = L.BiasLayer((2, 3, 4), b=rng.normal(size=(3, 4)).astype(FX), shared_axes=0)
    scale = L.ScaleLayer((2, 3, 4), scales=rng.normal(size=(2,)).astype(FX), shared_axes=(1, 2))
    xv = pt.tensor3("x")
    got_bias, got_scale = pytensor.function([xv], [bias.get_output_for(xv), scale.get_output_for(xv)])(x)
    np.testing.assert_allclose(got_bias, x + bias.b.get_value()[None], rtol=1e-6)
    np.testing.assert_allclose(got_scale, x * scale.scales.get_value()[:, None, None], rtol=1e-6)
    assert L.BiasLayer((None, 5, 7, 7)).b.get_value().shape == (5,)  # 'auto': one per channel
    assert L.BiasLayer((None, 5), b=None).get_output_for(xv) is xv
    with pytest.raises(ValueError, match="needs specified input sizes .* input shape \\(64, None, 3\\)"):
        L.ScaleLayer((64, None, 3), shared_axes=(0, 2))

    data = rng.normal(2.0, 3.0, size=(50, 3)).astype(FX)
    l_in = L.InputLayer((None, 3))
    l_std = L.standardize(l_in, data.mean(axis=0), data.std(axis=0), shared_axes=0)
    out = L.get_output(l_std).eval({l_in.input_var: data})
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=0), 1, atol=1e-5)
    assert len(L.get_all_params(l_std)) == 2 and L.get_all_params(l_std, trainable=True) == []


def test_inverse_layer_of_a_dense_layer_is_the_transposed_product():
    rng = np.random.default_rng(1)
    l_in = L.InputLayer((None, 6))
    dense = L.DenseLayer(l_in, 3, nonlinearity=None, b=None)
    inverse = L.InverseLayer(dense, dense)
    assert inverse.output_shape == (None, 6)
    x = rng.normal(size=(4, 6)).astype(FX)
    W = dense.W.get_value()
    np.testing.assert_allclose(L.get_output(inverse).eval({l_in.input_var: x}), x @ W @ W.T, rtol=1e-5, atol=1e-6)


def test_prelu_learns_slopes_per_channel():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 4, 4)).astype(FX)
    alpha = rng.uniform(size=(3, 4)).astype(FX)
    layer = L.ParametricRectifierLayer((None, 3, 4, 4), alpha=alpha, shared_axes=(0, 3))
    want = np.where(x > 0, x, x * alpha[None, :, :, None])
    np.testing.assert_allclose(layer.get_output_for(pt.constant(x)).eval(), want, rtol=1e-6)
    assert L.ParametricRectifierLayer((None, 3), shared_axes="all").alpha.get_value().shape == ()
    dense = L.DenseLayer((None, 5), 4)
    top = L.prelu(dense)
    assert dense.nonlinearity is L.nonlinearities.identity and top.alpha.get_value().shape == (4,)
    with pytest.raises(ValueError, match="needs specified input sizes"):
        L.ParametricRectifierLayer((None, 3, 28, 28), shared_axes=(1, 2, 3))


def test_rrelu_draws_slopes_in_range_per_channel_and_their_mean_when_deterministic():
    layer = L.RandomizedRectifierLayer((None, 3, 5, 5), lower=0.2, upper=0.6)
    xv = pt.tensor4("x")
    train = pytensor.function([xv], layer.get_output_for(xv))
    x = -np.ones((4, 3, 5, 5), FX)
    first, second = -train(x), -train(x)
    assert first.min() >= 0.2 and first.max() < 0.6
    assert np.all(np.ptp(first, axis=(0, 2, 3)) == 0) and np.ptp(first[0, :, 0, 0]) > 0  # one slope per channel
    assert not np.array_equal(first, second)  # a new draw per call
    np.testing.assert_allclose(layer.get_output_for(pt.constant(x), deterministic=True).eval(), -0.4, rtol=1e-6)
    np.testing.assert_array_equal(train(-x), -x)  # positive inputs pass
    with pytest.raises(ValueError, match="upper bound must be >= the lower bound"):
        L.RandomizedRectifierLayer((None, 3), lower=0.9, upper=0.1)
    dense = L.DenseLayer((None, 5), 4)
    assert isinstance(L.rrelu(dense), L.RandomizedRectifierLayer)
    assert dense.nonlinearity is L.nonlinearities.identity


def reflect(index, size):
    period = 2 * (size - 1)
    index = np.mod(index, period)
    return np.minimum(index, period - index)


BORDERS = {"nearest": lambda i, n: np.clip(i, 0, n - 1), "wrap": np.mod, "mirror": reflect}


def numpy_sample(images, xs, ys, rows, cols, border_mode):
    """Bilinear sampling by explicit loops over the (N, rows*cols) points (coordinates in [-1, 1])."""
    n, c, h, w = images.shape
    out = np.zeros((n, c, rows * cols))
    fix = BORDERS[border_mode]
    for b in range(n):
        for p in range(rows * cols):
            x, y = (xs[b, p] + 1) / 2 * (w - 1), (ys[b, p] + 1) / 2 * (h - 1)
            x0, y0 = np.floor(x), np.floor(y)
            for cx, cy in ((x0, y0), (x0 + 1, y0), (x0, y0 + 1), (x0 + 1, y0 + 1)):
                weight = (1 - abs(x - cx)) * (1 - abs(y - cy))
                out[b, :, p] += weight * images[b, :, int(fix(cy, h)), int(fix(cx, w))]
    return out.reshape(n, c, rows, cols)


def output_grid(rows, cols):
    x_t, y_t = np.meshgrid(np.linspace(-1, 1, cols), np.linspace(-1, 1, rows))
    return x_t.ravel(), y_t.ravel()


@pytest.mark.parametrize("border_mode", ["nearest", "mirror", "wrap"])
def test_affine_transformer_matches_numpy(border_mode):
    rng = np.random.default_rng(3)
    images = rng.normal(size=(2, 2, 6, 7))
    theta = np.array([[1.3, 0.2, 0.31, -0.1, 0.9, -0.27], [0.7, -0.5, 0.1, 0.4, 1.2, 0.6]])
    layer = L.TransformerLayer(L.InputLayer((None, 2, 6, 7)), L.InputLayer((None, 6)), downsample_factor=(1.5, 0.8),
                               border_mode=border_mode)
    rows, cols = layer.output_shape[2:]
    assert (rows, cols) == (4, 8)
    got = layer.get_output_for([pt.constant(images), pt.constant(theta)]).eval()
    x_t, y_t = output_grid(rows, cols)
    xs = theta[:, 0, None] * x_t + theta[:, 1, None] * y_t + theta[:, 2, None]
    ys = theta[:, 3, None] * x_t + theta[:, 4, None] * y_t + theta[:, 5, None]
    np.testing.assert_allclose(got, numpy_sample(images, xs, ys, rows, cols, border_mode), atol=1e-10)


def test_affine_transformer_with_unknown_sizes_and_its_gradient():
    rng = np.random.default_rng(4)
    images = rng.normal(size=(1, 1, 5, 5))
    theta = np.array([[0.93, 0.11, 0.057, -0.21, 1.07, 0.131]])  # no sample point on a pixel (a kink)
    fixed = L.TransformerLayer(L.InputLayer((None, 1, 5, 5)), L.InputLayer((None, 6)))
    free = L.TransformerLayer(L.InputLayer((None, 1, None, None)), L.InputLayer((None, 6)))
    assert free.output_shape == (None, 1, None, None)
    outs = [layer.get_output_for([pt.constant(images), pt.constant(theta)]).eval() for layer in (fixed, free)]
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-12)
    verify_grad(lambda t: fixed.get_output_for([pt.constant(images), t]), [theta], rng=rng)
    with pytest.raises(ValueError, match="must give \\(batch_size, 6\\), got shape \\(None, 5\\)"):
        L.TransformerLayer(L.InputLayer((None, 1, 5, 5)), L.InputLayer((None, 5)))
    with pytest.raises(ValueError, match="border_mode must be one of"):
        L.TransformerLayer(L.InputLayer((None, 1, 5, 5)), L.InputLayer((None, 6)), border_mode="reflect")


def numpy_thin_plate_spline(points, targets, x, y):
    """The spline through ``points`` (2, K) -> ``targets`` (2, K), evaluated at (x, y): solved as K w + P a = t,
    P^T w = 0 with the kernel r^2 log r^2."""
    def kernel(r2):
        return np.where(r2 > 0, r2 * np.log(np.where(r2 > 0, r2, 1)), 0)

    k = points.shape[1]
    P = np.column_stack([np.ones(k), points.T])
    K = kernel(((points[:, :, None] - points[:, None, :]) ** 2).sum(axis=0))
    system = np.block([[K, P], [P.T, np.zeros((3, 3))]])
    coeffs = np.linalg.solve(system, np.concatenate([targets.T, np.zeros((3, 2))]))  # (K+3, 2)
    r2 = (x[None] - points[0, :, None]) ** 2 + (y[None] - points[1, :, None]) ** 2
    basis = np.concatenate([kernel(r2), np.ones((1, x.size)), x[None], y[None]])
    return coeffs.T @ basis  # (2, P)


@pytest.mark.parametrize("precompute_grid", [True, False])
def test_thin_plate_spline_transformer_matches_numpy(precompute_grid):
    rng = np.random.default_rng(5)
    images = rng.normal(size=(2, 2, 6, 6))
    offsets = rng.normal(scale=0.15, size=(2, 2 * 9))
    layer = L.TPSTransformerLayer(L.InputLayer((None, 2, 6, 6)), L.InputLayer((None, 18)), control_points=9,
                                  precompute_grid=precompute_grid)
    got = layer.get_output_for([pt.constant(images), pt.constant(offsets)]).eval()
    side = np.linspace(-1, 1, 3)
    points = np.stack([np.tile(side, 3), np.repeat(side, 3)])  # x fastest
    x_t, y_t = output_grid(6, 6)
    source = [numpy_thin_plate_spline(points, points + o.reshape(2, 9), x_t, y_t) for o in offsets]
    xs, ys = np.stack([s[0] for s in source]), np.stack([s[1] for s in source])
    np.testing.assert_allclose(got, numpy_sample(images, xs, ys, 6, 6, "nearest"), atol=1e-8)
    identity = layer.get_output_for([pt.constant(images), pt.constant(np.zeros_like(offsets))]).eval()
    np.testing.assert_allclose(identity, images, atol=1e-12)
    with pytest.raises(ValueError, match="perfect square, got 8"):
        L.TPSTransformerLayer(L.InputLayer((None, 2, 6, 6)), L.InputLayer((None, 16)), control_points=8)
    with pytest.raises(ValueError, match="precompute_grid=True needs the input rows and cols"):
        L.TPSTransformerLayer(L.InputLayer((None, 2, None, 6)), L.InputLayer((None, 32)), precompute_grid=True)
