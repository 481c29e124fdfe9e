"""BatchNormLayer (training/inference, running statistics, the data-parallel policy) and the noise layers."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L

floatX = pytensor.config.floatX


def bn_ref(x, axes, gamma, beta, eps, mean=None, inv_std=None):
    shape = [1 if a in axes else s for a, s in enumerate(x.shape)]
    if mean is None:
        mean = x.mean(axis=axes)
        inv_std = 1 / np.sqrt(x.var(axis=axes) + eps)
    return (x - mean.reshape(shape)) * (gamma * inv_std).reshape(shape) + beta.reshape(shape)


@pytest.mark.parametrize("shape", [(16, 4), (6, 3, 4, 5)])
def test_batchnorm_train_updates_running_stats_and_inference_uses_them(shape):
    rng = np.random.default_rng(0)
    l_in = L.InputLayer((None,) + shape[1:])
    bn = L.BatchNormLayer(l_in, alpha=0.2, beta=L.init.Normal(1.0), gamma=L.init.Uniform((0.5, 2.0)))
    axes = (0,) + tuple(range(2, len(shape)))
    assert bn.axes == axes and bn.output_shape == l_in.shape
    train = pytensor.function([l_in.input_var], L.get_output(bn))
    infer = pytensor.function([l_in.input_var], L.get_output(bn, deterministic=True))
    gamma, beta = bn.gamma.get_value().astype(np.float64), bn.beta.get_value().astype(np.float64)
    mean, inv_std = np.zeros(shape[1]), np.ones(shape[1])
    for step in range(3):
        x = (rng.standard_normal(shape) * (step + 1) + step).astype(floatX)
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(train(x), bn_ref(x64, axes, gamma, beta, 1e-4), rtol=1e-4, atol=1e-4)
        mean = 0.8 * mean + 0.2 * x64.mean(axis=axes)
        inv_std = 0.8 * inv_std + 0.2 / np.sqrt(x64.var(axis=axes) + 1e-4)
        np.testing.assert_allclose(bn.mean.get_value(), mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.inv_std.get_value(), inv_std, rtol=1e-5, atol=1e-6)
    before = [bn.mean.get_value(), bn.inv_std.get_value()]
    np.testing.assert_allclose(infer(x), bn_ref(x64, axes, gamma, beta, 1e-4, mean, inv_std), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(bn.mean.get_value(), before[0])  # inference leaves the statistics alone
    np.testing.assert_array_equal(bn.inv_std.get_value(), before[1])


def test_batchnorm_state_updates_and_keyword_overrides():
    l_in = L.InputLayer((None, 3))
    bn = L.BatchNormLayer(l_in, beta=None, gamma=None, alpha=1.0)
    train_out = L.get_output(bn)
    assert [v.name for v in L.get_state_updates(train_out)] == ["mean", "inv_std"]
    assert not L.get_state_updates(L.get_output(bn, deterministic=True))
    assert not L.get_state_updates(L.get_output(bn, batch_norm_update_averages=False))
    # use the averages while still updating them (Lasagne's keywords)
    out = L.get_output(bn, batch_norm_use_averages=True, batch_norm_update_averages=True)
    f = pytensor.function([l_in.input_var], out)
    x = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, 9.0]], floatX)
    np.testing.assert_allclose(f(x), x)  # initial statistics: mean 0, inv_std 1; no beta/gamma
    np.testing.assert_allclose(bn.mean.get_value(), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(bn.inv_std.get_value(), 1 / np.sqrt(np.array([1.0, 4.0, 9.0]) + 1e-4), rtol=1e-6)
    # explicit updates instead of default updates give the same result
    bn.mean.set_value(np.zeros(3, floatX))
    g = pytensor.function([l_in.input_var], train_out, updates=L.get_state_updates(train_out))
    g(x)
    np.testing.assert_allclose(bn.mean.get_value(), [2.0, 4.0, 6.0])


def test_batchnorm_policy_running_stats_are_not_trainable():
    l_in = L.InputLayer((None, 5))
    net = L.batch_norm(L.DenseLayer(l_in, 4, name="fc"))
    assert [type(lyr).__name__ for lyr in L.get_all_layers(net)] == ["InputLayer", "DenseLayer", "BatchNormLayer",
                                                                  "NonlinearityLayer"]
    dense, bn = L.get_all_layers(net)[1:3]
    assert dense.b is None and dense.nonlinearity is L.nonlinearities.identity
    assert net.nonlinearity is L.nonlinearities.rectify and bn.name == "fc_bn"
    trainable = L.get_all_params(net, trainable=True)
    assert [p.name for p in trainable] == ["fc.W", "fc_bn.beta", "fc_bn.gamma"]
    assert [p.name for p in L.get_all_params(net)] == ["fc.W", "fc_bn.beta", "fc_bn.gamma", "fc_bn.mean",
                                                       "fc_bn.inv_std"]
    assert [p.name for p in L.get_all_params(net, regularizable=True)] == ["fc.W", "fc_bn.gamma"]
    assert L.get_running_stats(net) == [bn.mean, bn.inv_std]
    assert len(L.get_all_param_values(net)) == 5  # a saved model keeps its statistics
    # the training graph differentiates w.r.t. the trainable params only (what a ModelClass exposes)
    loss = pt.sum(L.get_output(net) ** 2)
    grads = pytensor.grad(loss, trainable)
    f = pytensor.function([l_in.input_var], grads)
    assert [g.shape for g in f(np.ones((3, 5), floatX))] == [(5, 4), (4,), (4,)]


class _SumComm:
    """Two-worker allreduce(SUM) seen from one worker: adds the other worker's buffer."""

    def __init__(self, other=None):
        self.other, self.sent = other, None

    def Get_size(self):
        return 2

    def allreduce(self, buf):
        self.sent = buf.copy()
        return buf + (buf if self.other is None else self.other)


def test_sync_running_stats_pools_workers_statistics():
    rng = np.random.default_rng(5)
    nets, fns = [], []
    for _ in range(2):
        l_in = L.InputLayer((None, 3, 2, 2))
        net = L.BatchNormLayer(L.Conv2DLayer(l_in, 4, 1, nonlinearity=None, W=np.eye(4, 3).reshape(4, 3, 1, 1)),
                               alpha=1.0)
        net = L.BatchNormLayer(L.DenseLayer(net, 2, nonlinearity=None), alpha=1.0)
        nets.append(net)
        fns.append(pytensor.function([l_in.input_var], L.get_output(net)))
    shards = [rng.standard_normal((8, 3, 2, 2)).astype(floatX) * s + s for s in (1.0, 3.0)]
    for fn, shard in zip(fns, shards):
        fn(shard)  # alpha=1: running statistics = this worker's batch statistics
    bn_a = [lyr for lyr in L.get_all_layers(nets[0]) if isinstance(lyr, L.BatchNormLayer)][0]
    bn_b = [lyr for lyr in L.get_all_layers(nets[1]) if isinstance(lyr, L.BatchNormLayer)][0]
    assert not np.allclose(bn_a.mean.get_value(), bn_b.mean.get_value())  # each worker kept its own
    expected = L.pool_running_stats([bn_a.mean.get_value(), bn_b.mean.get_value()],
                                    [bn_a.inv_std.get_value(), bn_b.inv_std.get_value()], bn_a.epsilon)
    # exchange: record each worker's buffer, then reduce with the other's
    rec = [_SumComm(), _SumComm()]
    saved = [L.get_all_param_values(n) for n in nets]
    for net, comm in zip(nets, rec):
        L.sync_running_stats(net, comm)
    for net, values in zip(nets, saved):
        L.set_all_param_values(net, values)
    assert L.sync_running_stats(nets[0], _SumComm(rec[1].sent)) == 2
    assert L.sync_running_stats(nets[1], _SumComm(rec[0].sent)) == 2
    for sa, sb in zip(L.get_running_stats(nets[0]), L.get_running_stats(nets[1])):
        np.testing.assert_allclose(sa.get_value(), sb.get_value(), rtol=1e-6)
    # pooled statistics = statistics of the union of the (equal-sized) shards
    union = np.concatenate(shards).astype(np.float64)
    feats = union[:, :3]  # the 1x1 conv with W = eye copies channels 0..2, channel 3 is 0
    np.testing.assert_allclose(bn_a.mean.get_value()[:3], feats.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn_a.inv_std.get_value()[:3], 1 / np.sqrt(feats.var(axis=(0, 2, 3)) + 1e-4),
                               rtol=1e-4)
    np.testing.assert_allclose(bn_a.mean.get_value(), expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn_a.inv_std.get_value(), expected[1], rtol=1e-5)
    assert L.sync_running_stats(L.InputLayer((None, 2)), _SumComm()) == 0


def test_batchnorm_errors():
    with pytest.raises(ValueError, match=r"needs specified input sizes .* got input shape \(None, None\)"):
        L.BatchNormLayer(L.InputLayer((None, None)))
    with pytest.raises(ValueError, match="alpha must be in \\[0, 1\\], got 2"):
        L.BatchNormLayer((None, 3), alpha=2)
    with pytest.raises(ValueError, match=r"axes \(0, 0\) are invalid"):
        L.BatchNormLayer((None, 3), axes=(0, 0))


def test_dropout_deterministic_and_statistics():
    L.init.set_rng(11)
    l_in = L.InputLayer((None, 200))
    drop = L.DropoutLayer(l_in, p=0.3)
    assert L.get_output(drop, deterministic=True) is l_in.input_var
    assert L.get_output(L.DropoutLayer(l_in, p=0.0)) is l_in.input_var
    plain = L.DropoutLayer(l_in, p=0.5, rescale=False)
    maps = L.DropoutLayer(L.InputLayer((None, 6, 5, 5), input_var=pt.tensor4("m")), p=0.5, shared_axes=(2, 3))
    f = pytensor.function([l_in.input_var, maps.input_layer.input_var], L.get_output([drop, plain, maps]))
    x = np.ones((100, 200), floatX)
    m = np.ones((40, 6, 5, 5), floatX)
    a1, b1, c1 = f(x, m)
    a2, _, _ = f(x, m)
    assert not np.array_equal(a1, a2)  # a new mask every call
    assert set(np.unique(a1)) <= {0.0, np.float32(1 / 0.7)}
    assert np.mean(a1 == 0) == pytest.approx(0.3, abs=0.01)
    assert np.mean(a1) == pytest.approx(1.0, abs=0.02)  # rescaled: expectation preserved
    assert set(np.unique(b1)) == {0.0, 1.0} and np.mean(b1) == pytest.approx(0.5, abs=0.01)
    per_map = c1.reshape(40, 6, 25)
    assert np.all(per_map.min(axis=2) == per_map.max(axis=2))  # whole feature maps dropped together
    assert np.mean(per_map[:, :, 0] == 0) == pytest.approx(0.5, abs=0.1)
    # the same init seed gives the same masks (reproducible runs)
    masks = []
    for _ in range(2):
        L.init.set_rng(3)
        layer = L.DropoutLayer(l_in, p=0.5)
        masks.append(pytensor.function([l_in.input_var], L.get_output(layer))(x[:4]))
    np.testing.assert_array_equal(masks[0], masks[1])
    with pytest.raises(ValueError, match="p must be in \\[0, 1\\), got 1.0"):
        L.DropoutLayer(l_in, p=1.0)


def test_gaussian_noise():
    l_in = L.InputLayer((None, 100))
    layer = L.GaussianNoiseLayer(l_in, sigma=0.5)
    assert L.get_output(layer, deterministic=True) is l_in.input_var
    out = pytensor.function([l_in.input_var], L.get_output(layer))(np.full((100, 100), 2.0, floatX))
    assert out.dtype == np.dtype(floatX)
    assert np.mean(out) == pytest.approx(2.0, abs=0.02) and np.std(out) == pytest.approx(0.5, rel=0.03)


def ref_lrn(x, alpha, k, beta, n):
    """Loop over channels: x[:, c] / (k + alpha * sum of x[:, j]**2 over |j - c| <= n // 2, 0 <= j < C) ** beta."""
    out = np.empty_like(x)
    C = x.shape[1]
    for c in range(C):
        lo, hi = max(0, c - n // 2), min(C, c + n // 2 + 1)
        out[:, c] = x[:, c] / (k + alpha * (x[:, lo:hi] ** 2).sum(axis=1)) ** beta
    return out


def test_local_response_normalization_matches_loops_and_gradient():
    rng = np.random.default_rng(6)
    l_in = L.InputLayer((None, 6, 3, 2))
    layers = [L.LocalResponseNormalization2DLayer(l_in), L.LocalResponseNormalization2DLayer(l_in, 0.3, 1.5, 0.6, 3),
              L.LocalResponseNormalization2DLayer(l_in, 0.2, 1.0, 1.0, 1),
              L.LocalResponseNormalization2DLayer(l_in, 0.1, 2.0, 0.5, 5)]
    x = rng.standard_normal((2, 6, 3, 2)).astype(floatX)
    outs = pytensor.function([l_in.input_var], L.get_output(layers))(x)
    for layer, got in zip(layers, outs):
        want = ref_lrn(x.astype(np.float64), layer.alpha, layer.k, layer.beta, layer.n)
        assert got.shape == want.shape and got.dtype == np.dtype(floatX)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytensor.config.change_flags(floatX="float64"):
        for beta in (0.75, 0.5, 1.0, 0.6):  # the square-root forms and the generic power
            layer = L.LocalResponseNormalization2DLayer((None, 5, 2, 2), alpha=0.5, k=1.0, beta=beta, n=3)
            pytensor.gradient.verify_grad(layer.get_output_for, [rng.standard_normal((2, 5, 2, 2))], rng=rng)
    with pytest.raises(NotImplementedError, match="only odd n are supported .* got 4"):
        L.LocalResponseNormalization2DLayer(l_in, n=4)
    with pytest.raises(ValueError, match="n must be an odd positive int .* got 0"):
        L.LocalResponseNormalization2DLayer(l_in, n=0)
    with pytest.raises(ValueError, match="k must be > 0, got 0"):
        L.LocalResponseNormalization2DLayer(l_in, k=0)
    with pytest.raises(ValueError, match=r"input must be 4-D .* got shape \(None, 6\)"):
        L.LocalResponseNormalization2DLayer((None, 6))


def test_batchnorm_after_a_layer_with_static_channel_count():
    """A reshape to constant sizes gives the batch statistics a static shape; the running averages still update."""
    l_in = L.InputLayer((None, 8))
    net = L.BatchNormLayer(L.ReshapeLayer(l_in, ([0], 2, 2, 2)), alpha=0.5)
    out = L.get_output(net)
    assert out.type.shape[1] == 2
    f = pytensor.function([l_in.input_var], out)
    x = np.arange(32, dtype=floatX).reshape(4, 8)
    f(x)
    want = 0.5 * x.reshape(4, 2, 2, 2).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(net.mean.get_value(), want, rtol=1e-6)
    assert net.mean.type.shape == (2,)  # params carry their static shape (the checks on it compile away)


def test_standardization_instance_and_layer_norm():
    rng = np.random.default_rng(11)
    x = rng.normal(2.0, 3.0, size=(2, 3, 4, 4)).astype(floatX)
    xv = pt.tensor4("x")
    spatial = L.StandardizationLayer((None, 3, 4, 4), epsilon=1e-4)
    features = L.StandardizationLayer((None, 3, 4, 4), axes="features", epsilon=1e-4)
    got_s, got_f = pytensor.function([xv], [spatial.get_output_for(xv), features.get_output_for(xv)])(x)
    for got, axes in ((got_s, (2, 3)), (got_f, (1, 2, 3))):
        want = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-4)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert spatial.get_params() == [] and L.StandardizationLayer((None, 5)).axes == (1,)

    conv = L.Conv2DLayer((None, 2, 4, 4), 3, 3, name="conv")
    top = L.instance_norm(conv)
    names = [layer.name for layer in L.get_all_layers(top)]
    assert names == ["conv", "conv_in", "conv_in_scale", "conv_in_bias", "conv_in_nonlin"]
    assert conv.b is None and conv.nonlinearity is L.nonlinearities.identity
    assert top.nonlinearity is L.nonlinearities.rectify
    assert isinstance(L.instance_norm(L.DenseLayer((None, 4, 2), 3), learn_scale=False, learn_bias=False,
                                      name="n").input_layer, L.StandardizationLayer)
    top = L.layer_norm(L.DenseLayer((None, 4), 3, nonlinearity=L.nonlinearities.tanh))
    assert isinstance(top.input_layer, L.BiasLayer) and top.input_layer.input_layer.input_layer.axes == (1,)
    assert top.nonlinearity is L.nonlinearities.tanh


def test_dropout_channels_and_locations_share_their_masks():
    l_in = L.InputLayer((None, 4, 3, 3))
    channels, locations = L.dropout_channels(l_in, p=0.5), L.dropout_locations(l_in, p=0.5)
    assert L.spatial_dropout is L.dropout_channels
    assert channels.shared_axes == (2, 3) and locations.shared_axes == (1,)
    f = pytensor.function([l_in.input_var], L.get_output([channels, locations]))
    by_channel, by_location = f(np.ones((8, 4, 3, 3), floatX))
    assert set(np.unique(by_channel)) <= {0.0, 2.0} and np.all(np.ptp(by_channel, axis=(2, 3)) == 0)
    assert np.all(np.ptp(by_location, axis=1) == 0) and 0 < by_location.mean() < 2
