"""Network helpers: layer order, outputs with several inputs, shapes, params by tag, param values."""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L

floatX = pytensor.config.floatX


def branchy():
    a = L.InputLayer((None, 4), name="a")
    b = L.InputLayer((None, 4), name="b")
    da = L.DenseLayer(a, 3, name="da")
    db = L.DenseLayer(b, 3, name="db")
    s = L.ElemwiseSumLayer([da, db], name="sum")
    top = L.DenseLayer(L.BatchNormLayer(s, name="bn"), 2, nonlinearity=L.nonlinearities.softmax, name="top")
    return a, b, da, db, s, top


def test_get_all_layers_topological_order():
    a, b, da, db, s, top = branchy()
    layers = L.get_all_layers(top)
    assert [lyr.name for lyr in layers] == ["a", "da", "b", "db", "sum", "bn", "top"]
    assert L.get_all_layers([da, db]) == [a, da, b, db]
    assert [lyr.name for lyr in L.get_all_layers(top, treat_as_input=[s])] == ["sum", "bn", "top"]
    assert L.get_all_layers(top)[-1] is top
    with pytest.raises(ValueError, match="expected layers .anything with output_shape., got str"):
        L.get_all_layers(["nope"])


def test_get_all_params_by_tags_and_count():
    a, b, da, db, s, top = branchy()
    names = lambda ps: [p.name for p in ps]  # noqa: E731
    assert names(L.get_all_params(top)) == ["da.W", "da.b", "db.W", "db.b", "bn.beta", "bn.gamma", "bn.mean",
                                            "bn.inv_std", "top.W", "top.b"]
    assert names(L.get_all_params(top, trainable=True)) == ["da.W", "da.b", "db.W", "db.b", "bn.beta", "bn.gamma",
                                                            "top.W", "top.b"]
    assert names(L.get_all_params(top, regularizable=True)) == ["da.W", "db.W", "bn.gamma", "top.W"]
    assert names(L.get_all_params(top, trainable=True, regularizable=False)) == ["da.b", "db.b", "bn.beta", "top.b"]
    assert names(L.get_all_params(top, trainable=False)) == ["bn.mean", "bn.inv_std"]
    assert L.count_params(top) == 2 * (4 * 3 + 3) + 4 * 3 + 3 * 2 + 2
    assert L.count_params(top, trainable=True) == L.count_params(top) - 6
    # a parameter shared by two layers is listed once
    tied = L.DenseLayer(da, 3, W=L.DenseLayer(da, 3).W)
    assert len(L.get_all_params([tied, tied])) == len(L.get_all_params(tied))


def test_param_values_round_trip_and_shape_errors():
    *_, top = branchy()
    values = L.get_all_param_values(top)
    new = [np.full(v.shape, i, dtype=np.float64) for i, v in enumerate(values)]
    L.set_all_param_values(top, new)
    got = L.get_all_param_values(top)
    assert all(g.dtype == np.dtype(floatX) for g in got)
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, i)
    L.set_all_param_values(top, values)
    for g, v in zip(L.get_all_param_values(top), values):
        np.testing.assert_array_equal(g, v)
    trainable = L.get_all_param_values(top, trainable=True)
    assert len(trainable) == 8
    with pytest.raises(ValueError, match=r"got 7 values for 8 parameters"):
        L.set_all_param_values(top, trainable[:7], trainable=True)
    bad = list(values)
    bad[2] = np.zeros((3, 4))
    with pytest.raises(ValueError, match=r"value 2 for parameter 'db.W' has shape \(3, 4\), expected \(4, 3\)"):
        L.set_all_param_values(top, bad)
    for g, v in zip(L.get_all_param_values(top), values):  # nothing was set by the failed call
        np.testing.assert_array_equal(g, v)


def test_get_output_inputs_and_shapes():
    a, b, da, db, s, top = branchy()
    x = np.ones((2, 4), floatX)
    f = pytensor.function([a.input_var, b.input_var], L.get_output([s, top], deterministic=True))
    summed, probs = f(x, 2 * x)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    # a dict may replace any layer's output; a numpy array becomes a constant
    replaced = L.get_output(top, {s: summed}, deterministic=True).eval()
    np.testing.assert_allclose(replaced, probs, rtol=1e-5)
    single = L.InputLayer((None, 4))
    d = L.DenseLayer(single, 3)
    np.testing.assert_allclose(L.get_output(d, x).eval(), np.maximum(x @ d.W.get_value() + d.b.get_value(), 0))
    with pytest.raises(ValueError, match="one input expression given for a network with 2 input layers"):
        L.get_output(top, pt.matrix())
    with pytest.raises(ValueError, match="no input expression for the free-floating layer"):
        L.get_output(L.DenseLayer((None, 3), 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        L.get_output(d, nonsense_flag=True)
    assert any("nonsense_flag" in str(w.message) for w in caught)
    assert L.get_output_shape(top) == (None, 2)
    assert L.get_output_shape([s, top], {a: (7, 4), b: (7, 4)}) == [(7, 3), (7, 2)]
    assert L.get_output_shape(d, (5, 4)) == (5, 3)
