"""LSTMLayer against a NumPy LSTM step loop; gradients by finite differences; gradient clipping."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad
from pytensor.graph.replace import clone_replace

import theanompi.nn as L

floatX = pytensor.config.floatX


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def numpy_lstm(layer, x, mask=None):
    """Explicit step loop with the layer's parameter values (float64)."""
    g = {p.name: p.get_value().astype(np.float64) for p in layer.get_params()}
    n_batch, n_steps, _ = x.shape
    x = x.reshape(n_batch, n_steps, -1).astype(np.float64)
    c = np.repeat(g["cell_init"], n_batch, 0)
    h = np.repeat(g["hid_init"], n_batch, 0)
    out = np.zeros((n_batch, n_steps, layer.num_units))
    steps = range(n_steps)[::-1] if layer.backwards else range(n_steps)
    last = None
    for t in steps:
        pre = {k: x[:, t] @ g[f"W_in_to_{k}"] + h @ g[f"W_hid_to_{k}"] + g[f"b_{k}"]
               for k in ("ingate", "forgetgate", "cell", "outgate")}
        if layer.peepholes:
            pre["ingate"] = pre["ingate"] + c * g["W_cell_to_ingate"]
            pre["forgetgate"] = pre["forgetgate"] + c * g["W_cell_to_forgetgate"]
        i, f = sigmoid(pre["ingate"]), sigmoid(pre["forgetgate"])
        c_new = f * c + i * np.tanh(pre["cell"])
        o_pre = pre["outgate"] + (c_new * g["W_cell_to_outgate"] if layer.peepholes else 0)
        h_new = sigmoid(o_pre) * np.tanh(c_new)
        if mask is not None:
            keep = mask[:, t:t + 1] != 0
            c_new, h_new = np.where(keep, c_new, c), np.where(keep, h_new, h)
        c, h = c_new, h_new
        out[:, t] = h
        last = h
    return out, last


@pytest.mark.slow
def test_lstm_matches_numpy_loop():
    L.init.set_rng(0)
    rng = np.random.default_rng(0)
    l_in = L.InputLayer((None, 5, 3))
    l_mask = L.InputLayer((None, 5), input_var=pt.matrix("mask"))
    init = dict(cell_init=L.init.Normal(0.5), hid_init=L.init.Normal(0.5))
    layers = {
        "default": L.LSTMLayer(l_in, 4, **init),
        "backwards_final": L.LSTMLayer(l_in, 3, backwards=True, only_return_final=True, **init),
        "no_peep_unrolled": L.LSTMLayer(l_in, 4, peepholes=False, unroll_scan=True, **init),
        "masked": L.LSTMLayer(l_in, 2, mask_input=l_mask, precompute_input=False, **init),
    }
    assert layers["default"].output_shape == (None, 5, 4)
    assert layers["backwards_final"].output_shape == (None, 3)
    f = pytensor.function([l_in.input_var, l_mask.input_var], L.get_output(list(layers.values())))
    x = rng.standard_normal((2, 5, 3)).astype(floatX)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], floatX)
    outs = f(x, mask)
    for (name, layer), got in zip(layers.items(), outs):
        seq, last = numpy_lstm(layer, x, mask if name == "masked" else None)
        want = last if layer.only_return_final else seq
        assert got.shape == want.shape and got.dtype == np.dtype(floatX), name
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(outs[3][0, 3], outs[3][0, 2])  # masked steps carry the state over


def test_lstm_params_and_tags():
    l_in = L.InputLayer((None, None, 6))
    layer = L.LSTMLayer(l_in, 5, name="lstm")
    names = [p.name for p in layer.get_params(trainable=True)]
    assert names[:3] == ["lstm.W_in_to_ingate", "lstm.W_hid_to_ingate", "lstm.b_ingate"]
    assert len(names) == 15 and "lstm.cell_init" not in names  # 4 gates x 3 + 3 peepholes
    assert [p.name for p in layer.get_params(trainable=False)] == ["lstm.cell_init", "lstm.hid_init"]
    learn = L.LSTMLayer(l_in, 5, learn_init=True, peepholes=False)
    assert len(learn.get_params(trainable=True)) == 14
    assert L.count_params(learn) == 4 * (6 * 5 + 5 * 5 + 5) + 2 * 5
    with pytest.raises(ValueError, match=r"feature dimensions must be known, got input shape \(None, 4, None\)"):
        L.LSTMLayer(L.InputLayer((None, 4, None)), 3)
    with pytest.raises(ValueError, match=r"unroll_scan=True needs a known sequence length"):
        L.LSTMLayer(l_in, 3, unroll_scan=True)
    with pytest.raises(ValueError, match="peepholes=True needs W_cell for the ingate"):
        L.LSTMLayer(l_in, 3, ingate=L.Gate(W_cell=None))


@pytest.mark.slow
def test_lstm_gradient_float64_and_clipping():
    with pytensor.config.change_flags(floatX="float64"):
        L.init.set_rng(4)
        l_in = L.InputLayer((None, 3, 2))
        layer = L.LSTMLayer(l_in, 3)
        out = L.get_output(layer)
        rng = np.random.default_rng(1)

        def fun(x, w_in, w_hid, peep):
            return clone_replace(out, {l_in.input_var: x, layer.W_in_to_forgetgate: w_in,
                                       layer.W_hid_to_cell: w_hid, layer.W_cell_to_outgate: peep})

        verify_grad(fun, [rng.standard_normal((2, 3, 2)), layer.W_in_to_forgetgate.get_value(),
                          layer.W_hid_to_cell.get_value(), layer.W_cell_to_outgate.get_value()], rng=rng)

        clipped = L.LSTMLayer(l_in, 3, grad_clipping=1e-3)
        L.set_all_param_values(clipped, L.get_all_param_values(layer))
        outs = [L.get_output(layer), L.get_output(clipped)]
        grads = [pytensor.grad(pt.sum(o) * 100.0, lyr.W_in_to_cell) for o, lyr in zip(outs, (layer, clipped))]
        f = pytensor.function([l_in.input_var], outs + grads)
        y, y_clip, g, g_clip = f(rng.standard_normal((4, 3, 2)))
        np.testing.assert_allclose(y, y_clip)  # forward unchanged
        assert np.abs(g_clip).max() < 0.1 * np.abs(g).max()


def numpy_rnn(layer, x, mask=None, hid0=None):
    """h_t = relu(x_t W_in + b + h_{t-1} W_hid), masked steps carried over; (batch, time, units)."""
    W_in, W_hid, b = (p.get_value().astype(np.float64) for p in (layer.W_in_to_hid, layer.W_hid_to_hid, layer.b))
    h = np.zeros((x.shape[0], W_hid.shape[0])) if hid0 is None else hid0
    out = np.zeros((x.shape[0], x.shape[1], W_hid.shape[0]))
    for t in range(x.shape[1]):
        new = np.maximum(x[:, t] @ W_in + b + h @ W_hid, 0)
        h = new if mask is None else np.where(mask[:, t:t + 1] != 0, new, h)
        out[:, t] = h
    return out


def numpy_gru(layer, x):
    g = {p.name: p.get_value().astype(np.float64) for p in layer.get_params()}
    h = np.repeat(g["hid_init"], x.shape[0], 0)
    out = np.zeros((x.shape[0], x.shape[1], layer.num_units))
    steps = range(x.shape[1])[::-1] if layer.backwards else range(x.shape[1])
    for t in steps:
        x_in = {gate: x[:, t] @ g[f"W_in_to_{gate}"] + g[f"b_{gate}"] for gate in layer.GATES}
        r = sigmoid(x_in["resetgate"] + h @ g["W_hid_to_resetgate"])
        u = sigmoid(x_in["updategate"] + h @ g["W_hid_to_updategate"])
        c = np.tanh(x_in["hidden_update"] + r * (h @ g["W_hid_to_hidden_update"]))
        h = (1 - u) * h + u * c
        out[:, t] = h
    return out


@pytest.mark.slow
def test_rnn_and_gru_match_numpy_loops():
    L.init.set_rng(1)
    rng = np.random.default_rng(1)
    l_in = L.InputLayer((None, 4, 3))
    l_mask = L.InputLayer((None, 4))
    rnn = L.RecurrentLayer(l_in, 5, W_in_to_hid=L.init.Normal(0.5), W_hid_to_hid=L.init.Normal(0.5),
                           b=L.init.Normal(0.5), mask_input=l_mask)
    rnn_unrolled = L.RecurrentLayer(l_in, 5, W_in_to_hid=rnn.W_in_to_hid, W_hid_to_hid=rnn.W_hid_to_hid, b=rnn.b,
                                    unroll_scan=True, precompute_input=False, mask_input=l_mask)
    gru = L.GRULayer(l_in, 3, hid_init=L.init.Normal(0.5))
    gru_back = L.GRULayer(l_in, 3, backwards=True, learn_init=True)
    x = rng.standard_normal((2, 4, 3)).astype(floatX)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], floatX)
    f = pytensor.function([l_in.input_var, l_mask.input_var], L.get_output([rnn, rnn_unrolled, gru, gru_back]))
    got = f(x, mask)
    want = numpy_rnn(rnn, x, mask)
    for out in got[:2]:
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], numpy_gru(gru, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[3], numpy_gru(gru_back, x), rtol=1e-4, atol=1e-5)
    assert [p.name for p in rnn.get_params(trainable=True)] == ["input_to_hidden.W", "input_to_hidden.b",
                                                                 "hidden_to_hidden.W"]
    assert gru_back.hid_init in L.get_all_params(gru_back, trainable=True)


@pytest.mark.slow
def test_initial_states_as_layers_and_custom_networks():
    L.init.set_rng(2)
    rng = np.random.default_rng(2)
    l_in, l_hid, l_cell = L.InputLayer((None, 3, 2)), L.InputLayer((None, 4)), L.InputLayer((None, 4))
    lstm = L.LSTMLayer(l_in, 4, hid_init=l_hid, cell_init=l_cell)
    assert L.get_all_layers(lstm) == [l_in, l_hid, l_cell, lstm]
    hid0, cell0 = rng.standard_normal((1, 4)).astype(floatX), rng.standard_normal((1, 4)).astype(floatX)
    lstm_arrays = L.LSTMLayer(l_in, 4, hid_init=hid0, cell_init=cell0)
    L.set_all_param_values(lstm_arrays, L.get_all_param_values(lstm) + [cell0, hid0])
    rnn = L.RecurrentLayer(l_in, 4, hid_init=l_hid)
    in_to_hid = L.DenseLayer(L.InputLayer((None, 2)), 4, W=rnn.W_in_to_hid, b=rnn.b, nonlinearity=None)
    hid_to_hid = L.DenseLayer(L.InputLayer((None, 4)), 4, W=rnn.W_hid_to_hid, b=None, nonlinearity=None)
    custom = L.CustomRecurrentLayer(l_in, in_to_hid, hid_to_hid, hid_init=l_hid, precompute_input=False)
    x = rng.standard_normal((2, 3, 2)).astype(floatX)
    h0, c0 = np.repeat(hid0, 2, 0), np.repeat(cell0, 2, 0)
    f = pytensor.function([l_in.input_var, l_hid.input_var, l_cell.input_var],
                          L.get_output([lstm, lstm_arrays, rnn, custom]))
    got = f(x, h0, c0)
    np.testing.assert_allclose(got[0], got[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], numpy_rnn(rnn, x, hid0=h0.astype(np.float64)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[3], got[2], rtol=1e-5, atol=1e-6)
    assert set(custom.get_params()) == {rnn.W_in_to_hid, rnn.b, rnn.W_hid_to_hid}


def test_recurrent_layer_errors():
    l_in = L.InputLayer((None, 3, 2))
    with pytest.raises(ValueError, match="gradient_steps must be -1, got 3"):
        L.GRULayer(l_in, 2, gradient_steps=3, unroll_scan=True)
    with pytest.raises(ValueError, match=r"unroll_scan=True needs a known sequence length"):
        L.RecurrentLayer(L.InputLayer((None, None, 2)), 2, unroll_scan=True)
    two_inputs = L.ConcatLayer([L.InputLayer((None, 2)), L.InputLayer((None, 2))])
    hid_to_hid = L.DenseLayer(L.InputLayer((None, 4)), 4)
    with pytest.raises(ValueError, match="input_to_hidden must have exactly one InputLayer, it has 2"):
        L.CustomRecurrentLayer(l_in, L.DenseLayer(two_inputs, 4), hid_to_hid)
    with pytest.raises(ValueError, match="must give the same shape after the first axis"):
        L.CustomRecurrentLayer(l_in, L.DenseLayer(L.InputLayer((None, 2)), 5), hid_to_hid)
    with pytest.raises(ValueError, match="mask_input must be \\(batch, time\\)"):
        L.GRULayer(l_in, 2, mask_input=L.InputLayer((None, 3, 1)))
