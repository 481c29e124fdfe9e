"""Objectives against NumPy; sgd/momentum/nesterov/adam against NumPy for a few steps."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from theanompi.nn import objectives as obj
from theanompi.nn import updates as upd

floatX = pytensor.config.floatX


def test_objectives_match_numpy():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=6).astype(floatX)
    p[0] = [1.0, 0.0, 0.0, 0.0]  # exact zeros of other classes must not give nan
    y = np.array([0, 1, 2, 3, 1, 0], np.int32)
    t = rng.dirichlet(np.ones(4), size=6).astype(floatX)
    bp = rng.uniform(0.05, 0.95, 6).astype(floatX)
    bt = (rng.uniform(size=6) > 0.5).astype(floatX)
    P, Y, T, BP, BT = pt.matrix(), pt.ivector(), pt.matrix(), pt.vector(), pt.vector()
    W = pt.vector()
    outs = [obj.categorical_crossentropy(P, Y), obj.categorical_crossentropy(P, T), obj.binary_crossentropy(BP, BT),
            obj.squared_error(BP, BT), obj.categorical_accuracy(P, Y), obj.categorical_accuracy(P, Y, top_k=2),
            obj.categorical_accuracy(P, T), obj.binary_accuracy(BP, BT),
            obj.aggregate(obj.squared_error(BP, BT)), obj.aggregate(obj.squared_error(BP, BT), mode="sum"),
            obj.aggregate(obj.squared_error(BP, BT), W, mode="normalized_sum"), obj.l2(P), obj.l1(T)]
    f = pytensor.function([P, Y, T, BP, BT, W], outs)
    w = rng.uniform(size=6).astype(floatX)
    got = f(p, y, t, bp, bt, w)
    p64 = p.astype(np.float64)
    se = (bp.astype(np.float64) - bt) ** 2
    top2 = np.argsort(p64, axis=1)[:, -2:]
    want = [-np.log(p64[np.arange(6), y]), -(t * np.log(np.maximum(p64, 1e-30))).sum(1),
            -(bt * np.log(bp) + (1 - bt) * np.log(1 - bp)), se, (p64.argmax(1) == y).astype(float),
            np.array([y[i] in top2[i] for i in range(6)], float), (p64.argmax(1) == t.argmax(1)).astype(float),
            ((bp >= 0.5) == (bt > 0.5)).astype(float), se.mean(), se.sum(), (se * w).sum() / w.sum(),
            (p64 ** 2).sum(), np.abs(t).sum()]
    for i, (g, wv) in enumerate(zip(got, want)):
        if i == 1:
            g, wv = g[1:], wv[1:]  # row 0 has log(0) * t: inf, as in Lasagne
        assert np.all(np.isfinite(g)), i
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-6, err_msg=str(i))
        assert np.asarray(g).dtype == np.dtype(floatX), i
    assert got[0][0] == 0.0
    with pytest.raises(ValueError, match="mode must be 'mean', 'sum' or 'normalized_sum', got 'median'"):
        obj.aggregate(BP, mode="median")
    with pytest.raises(ValueError, match="targets must have ndim 1 .* or 2 .* got ndim=3"):
        obj.categorical_crossentropy(P, pt.tensor3())


def grad_np(w):
    """Gradient of the test loss 0.5 * sum(a * w**2) + sum(w**3)/3 at w."""
    return np.array([1.0, 3.0, 0.5]) * w + w ** 2


@pytest.mark.parametrize("method", ["sgd", "momentum", "nesterov_momentum", "adam", "adagrad", "rmsprop", "adadelta"])
def test_updates_match_numpy(method):
    w0 = np.array([1.0, -2.0, 0.5])
    w = pytensor.shared(w0.astype(floatX), name="w")
    loss = 0.5 * pt.sum(np.array([1.0, 3.0, 0.5], floatX) * w ** 2) + pt.sum(w ** 3) / np.float32(3)
    lr = pytensor.shared(np.asarray(0.05, floatX), name="lr")  # a shared learning rate works too
    kwargs = {"sgd": {}, "momentum": {"momentum": 0.8}, "nesterov_momentum": {"momentum": 0.8},
              "adam": {"beta1": 0.8, "beta2": 0.9}, "adagrad": {"epsilon": 1e-3}, "rmsprop": {"rho": 0.7},
              "adadelta": {"rho": 0.8, "epsilon": 1e-2}}[method]
    ups = getattr(upd, method)(loss, [w], lr, **kwargs)
    assert type(ups).__name__ == "OrderedDict" and list(ups)[0] is not None
    assert all(v.dtype == k.dtype for k, v in ups.items())
    step = pytensor.function([], loss, updates=ups)
    ref, v, m, s, acc, acc_d = w0.copy(), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3)
    for t in range(1, 6):
        step()
        g = grad_np(ref)
        if method == "sgd":
            ref = ref - 0.05 * g
        elif method == "momentum":
            v = 0.8 * v - 0.05 * g
            ref = ref + v
        elif method == "nesterov_momentum":
            v = 0.8 * v - 0.05 * g
            ref = ref + 0.8 * v - 0.05 * g
        elif method == "adagrad":
            acc = acc + g ** 2
            ref = ref - 0.05 * g / np.sqrt(acc + 1e-3)
        elif method == "rmsprop":
            acc = 0.7 * acc + 0.3 * g ** 2
            ref = ref - 0.05 * g / np.sqrt(acc + 1e-6)
        elif method == "adadelta":
            acc = 0.8 * acc + 0.2 * g ** 2
            d = g * np.sqrt(acc_d + 1e-2) / np.sqrt(acc + 1e-2)
            ref = ref - 0.05 * d
            acc_d = 0.8 * acc_d + 0.2 * d ** 2
        else:
            m = 0.8 * m + 0.2 * g
            s = 0.9 * s + 0.1 * g ** 2
            ref = ref - 0.05 * np.sqrt(1 - 0.9 ** t) / (1 - 0.8 ** t) * m / (np.sqrt(s) + 1e-8)
        np.testing.assert_allclose(w.get_value(), ref, rtol=1e-5, atol=1e-6, err_msg=f"{method} step {t}")


def test_apply_momentum_list_of_grads_and_norm_constraint():
    w = pytensor.shared(np.ones(2, floatX), name="w")
    g = pt.vector("g")
    ups = upd.apply_nesterov_momentum(upd.sgd([g], [w], 0.1), momentum=0.5)
    f = pytensor.function([g], [], updates=ups)
    f(np.array([1.0, 2.0], floatX))
    np.testing.assert_allclose(w.get_value(), 1 + 0.5 * np.array([-0.1, -0.2]) - np.array([0.1, 0.2]), rtol=1e-6)
    scaled, norm = upd.total_norm_constraint([g, 2 * g], max_norm=1.0, return_norm=True)
    out = pytensor.function([g], scaled + [norm])(np.array([3.0, 4.0], floatX))
    assert out[2] == pytest.approx(np.sqrt(125), rel=1e-6)
    assert np.sqrt(np.sum(out[0] ** 2) + np.sum(out[1] ** 2)) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(ValueError, match="got 2 gradients for 1 parameters"):
        upd.sgd([g, g], [w], 0.1)
    with pytest.raises(ValueError, match="params must be shared variables"):
        upd.sgd(pt.sum(g), [g], 0.1)


def test_regularization_penalties_match_numpy():
    import theanompi.nn as L

    L.init.set_rng(9)
    l_in = L.InputLayer((None, 3))
    hidden = L.BatchNormLayer(L.DenseLayer(l_in, 4))
    top = L.DenseLayer(hidden, 2)
    reg = L.regularization
    W1, W2 = hidden.input_layer.W.get_value(), top.W.get_value()
    gamma = hidden.gamma.get_value()
    # regularizable: both W and batch-norm gamma (as in Lasagne); never biases, beta or the running statistics.
    np.testing.assert_allclose(reg.regularize_network_params(top, reg.l2).eval(),
                               (W1 ** 2).sum() + (W2 ** 2).sum() + (gamma ** 2).sum(), rtol=1e-5)
    np.testing.assert_allclose(reg.regularize_layer_params(top, reg.l1).eval(), np.abs(W2).sum(), rtol=1e-5)
    np.testing.assert_allclose(reg.regularize_layer_params_weighted({top: 0.5, hidden.input_layer: 2.0}, reg.l2).eval(),
                               0.5 * (W2 ** 2).sum() + 2.0 * (W1 ** 2).sum(), rtol=1e-5)
    np.testing.assert_allclose(reg.regularize_network_params(top, reg.l2, tags={"trainable": True}).eval(),
                               sum((p.get_value() ** 2).sum() for p in L.get_all_params(top, trainable=True)),
                               rtol=1e-5)
    assert reg.regularize_layer_params(L.FlattenLayer(l_in), reg.l2) == 0  # no parameters: Lasagne's int 0


def test_utils_helpers():
    from theanompi.nn import utils

    assert utils.floatX([1, 2]).dtype == np.dtype(pytensor.config.floatX)
    assert utils.as_tuple(2, 3) == (2, 2, 2) and utils.as_tuple([1, 2], 2, int) == (1, 2)
    with pytest.raises(ValueError, match=r"iterable with length 2, got \(1, 2, 3\)"):
        utils.as_tuple((1, 2, 3), 2)
    with pytest.raises(TypeError, match=r"iterable of int, got \(1, 'a'\)"):
        utils.as_tuple((1, "a"), 2, int)
    np.testing.assert_array_equal(utils.one_hot(np.array([1, 0, 1])).eval(), [[0, 1], [1, 0], [0, 1]])
    assert utils.shared_empty(2, "int32").get_value().shape == (1, 1)
    assert utils.unique([3, 1, 3, 2, 1]) == [3, 1, 2]
    with pytest.raises(TypeError, match="cannot turn dict"):
        utils.as_expression({"a": 1})
