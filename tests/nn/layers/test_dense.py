"""DenseLayer, NonlinearityLayer and the nonlinearities against NumPy; gradients by finite differences."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad
from pytensor.graph.replace import clone_replace

import theanompi.nn as L
from theanompi.nn import nonlinearities as nl

floatX = pytensor.config.floatX


def test_dense_values_and_shapes():
    L.init.set_rng(0)
    rng = np.random.default_rng(1)
    l_in = L.InputLayer((None, 5))
    dense = L.DenseLayer(l_in, 7, b=L.init.Normal(1.0), nonlinearity=nl.tanh)
    l_in3 = L.InputLayer((None, 3, 4, 2))
    lead2 = L.DenseLayer(l_in3, 6, nonlinearity=None, num_leading_axes=2)
    flat = L.DenseLayer(l_in3, 6, nonlinearity=nl.rectify)
    assert dense.output_shape == (None, 7) and lead2.output_shape == (None, 3, 6) and flat.output_shape == (None, 6)
    assert lead2.W.get_value().shape == (8, 6) and flat.W.get_value().shape == (24, 6)
    f = pytensor.function([l_in.input_var, l_in3.input_var], L.get_output([dense, lead2, flat]))
    x = rng.standard_normal((4, 5)).astype(floatX)
    x3 = rng.standard_normal((4, 3, 4, 2)).astype(floatX)
    a, b, c = f(x, x3)
    W, bias = dense.W.get_value().astype(np.float64), dense.b.get_value().astype(np.float64)
    np.testing.assert_allclose(a, np.tanh(x @ W + bias), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, x3.reshape(4, 3, 8) @ lead2.W.get_value() + lead2.b.get_value(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(c, np.maximum(x3.reshape(4, 24) @ flat.W.get_value(), 0), rtol=1e-5, atol=1e-6)
    assert a.dtype == b.dtype == c.dtype == np.dtype(floatX)
    assert [p.name for p in L.get_all_params(dense)] == ["W", "b"]
    assert [p.name for p in L.get_all_params(L.DenseLayer(l_in, 2, b=None))] == ["W"]


def test_nonlinearities_match_numpy_and_keep_dtype():
    x = pt.matrix("x")
    funcs = {
        "sigmoid": (nl.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
        "tanh": (nl.tanh, np.tanh),
        "rectify": (nl.rectify, lambda v: np.maximum(v, 0)),
        "leaky_rectify": (nl.leaky_rectify, lambda v: np.where(v > 0, v, 0.01 * v)),
        "very_leaky": (nl.very_leaky_rectify, lambda v: np.where(v > 0, v, v / 3)),
        "elu": (nl.elu, lambda v: np.where(v > 0, v, np.expm1(v))),
        "selu": (nl.selu, lambda v: 1.0507009873554805 * np.where(v > 0, v, 1.6732632423543772 * np.expm1(v))),
        "softplus": (nl.softplus, lambda v: np.log1p(np.exp(v))),
        "linear": (nl.linear, lambda v: v),
        "identity": (nl.identity, lambda v: v),
        "scaled_tanh": (nl.ScaledTanH(0.5, 2.0), lambda v: 2.0 * np.tanh(0.5 * v)),
        "softmax": (nl.softmax, lambda v: np.exp(v) / np.exp(v).sum(1, keepdims=True)),
    }
    outs = [fn(x) for fn, _ in funcs.values()]
    assert all(o.dtype == floatX for o in outs)
    f = pytensor.function([x], outs, on_unused_input="ignore")
    v = np.random.default_rng(0).standard_normal((5, 6)).astype(floatX) * 3
    for (name, (_, ref)), got in zip(funcs.items(), f(v)):
        np.testing.assert_allclose(got, ref(v.astype(np.float64)), rtol=2e-5, atol=2e-6, err_msg=name)


def test_nonlinearity_layer():
    l_in = L.InputLayer((None, 3))
    layer = L.NonlinearityLayer(l_in, nl.sigmoid)
    v = np.array([[-1.0, 0.0, 2.0]], floatX)
    np.testing.assert_allclose(L.get_output(layer, v).eval(), 1 / (1 + np.exp(-v)), rtol=1e-6)
    assert L.NonlinearityLayer(l_in, None).nonlinearity is nl.identity


def test_dense_gradient_float64():
    with pytensor.config.change_flags(floatX="float64"):
        L.init.set_rng(3)
        l_in = L.InputLayer((None, 4))
        layer = L.DenseLayer(L.DenseLayer(l_in, 3, nonlinearity=nl.tanh), 2, nonlinearity=nl.softmax)
        W1, b1, W2, b2 = L.get_all_params(layer)
        assert W1.dtype == "float64"
        out = L.get_output(layer)

        def fun(x, w1, b1_, w2):
            return clone_replace(out, {l_in.input_var: x, W1: w1, b1: b1_, W2: w2})

        rng = np.random.default_rng(0)
        verify_grad(fun, [rng.standard_normal((3, 4)), W1.get_value(), rng.standard_normal(3), W2.get_value()],
                    rng=rng)


def test_dense_errors_quote_values():
    l_in = L.InputLayer((None, 5))
    with pytest.raises(ValueError, match="num_units must be a positive int, got 0"):
        L.DenseLayer(l_in, 0)
    with pytest.raises(ValueError, match="num_leading_axes=2 for an input of shape \\(None, 5\\), leaving no trailing"):
        L.DenseLayer(l_in, 3, num_leading_axes=2)
    with pytest.raises(ValueError, match="num_leading_axes=-2 .* requesting more trailing axes than there are"):
        L.DenseLayer(l_in, 3, num_leading_axes=-2)
    with pytest.raises(ValueError, match=r"requires a fixed input shape .* got input shape \(None, None\)"):
        L.DenseLayer(L.InputLayer((None, None)), 3)
    with pytest.raises(ValueError, match=r"array given for param 'W' has shape \(4, 3\), expected \(5, 3\)"):
        L.DenseLayer(l_in, 3, W=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="has 1 dimensions, expected 2"):
        L.DenseLayer(l_in, 3, W=pytensor.shared(np.zeros(3, floatX), name="w"))
    with pytest.raises(ValueError, match="shape entries must be positive ints or None, got \\(None, 0\\)"):
        L.InputLayer((None, 0))
    with pytest.raises(ValueError, match="an incoming must be a layer .anything with output_shape. or a shape tuple, "
                                         "got list"):
        L.DenseLayer([None, 3], 2)
    named = L.DenseLayer(l_in, 2, name="fc1")
    assert [p.name for p in named.get_params()] == ["fc1.W", "fc1.b"]
    shared_W = pytensor.shared(np.ones((5, 2), floatX), name="tied")
    assert L.DenseLayer(l_in, 2, W=shared_W).W is shared_W
