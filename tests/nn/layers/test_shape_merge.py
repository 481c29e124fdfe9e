"""FlattenLayer, ReshapeLayer, DimshuffleLayer, ElemwiseSumLayer, ConcatLayer against NumPy."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L

floatX = pytensor.config.floatX


def test_flatten_reshape_dimshuffle_values_and_shapes():
    l_in = L.InputLayer((None, 2, 3, 4))
    n = pt.iscalar("n")
    layers = {
        "flatten2": (L.FlattenLayer(l_in), lambda x: x.reshape(len(x), -1), (None, 24)),
        "flatten3": (L.FlattenLayer(l_in, outdim=3), lambda x: x.reshape(len(x), 2, 12), (None, 2, 12)),
        "flatten1": (L.FlattenLayer(l_in, outdim=1), lambda x: x.ravel(), (None,)),
        "ref0": (L.ReshapeLayer(l_in, ([0], -1, 4)), lambda x: x.reshape(len(x), 6, 4), (None, 6, 4)),
        "refs": (L.ReshapeLayer(l_in, ([0], [2], [1], 4)), lambda x: x.reshape(len(x), 3, 2, 4), (None, 3, 2, 4)),
        "minus": (L.ReshapeLayer(l_in, (-1, 12)), lambda x: x.reshape(-1, 12), (None, 12)),
        "symbolic": (L.ReshapeLayer(l_in, ([0], n, -1)), lambda x: x.reshape(len(x), 4, -1), (None, None, None)),
        "dimshuffle": (L.DimshuffleLayer(l_in, (0, 3, "x", 1, 2)), lambda x: x.transpose(0, 3, 1, 2)[:, :, None],
                       (None, 4, 1, 2, 3)),
    }
    f = pytensor.function([l_in.input_var, n], L.get_output([v[0] for v in layers.values()]))
    x = np.arange(5 * 24, dtype=floatX).reshape(5, 2, 3, 4)
    for (name, (layer, ref, shape)), got in zip(layers.items(), f(x, 4)):
        np.testing.assert_array_equal(got, ref(x), err_msg=name)
        assert layer.output_shape == shape, name
    assert L.get_output_shape(layers["minus"][0], (5, 2, 3, 4)) == (10, 12)
    assert L.ReshapeLayer((6, 4), (-1, 2, [1])).output_shape == (3, 2, 4)


def test_reshape_and_flatten_errors_quote_values():
    with pytest.raises(ValueError, match=r"total sizes do not match \(24 is not a multiple of 5\)"):
        L.ReshapeLayer((2, 3, 4), (5, -1))
    with pytest.raises(ValueError, match=r"total sizes do not match \(24 != 25\)"):
        L.ReshapeLayer((2, 3, 4), (5, 5))
    with pytest.raises(ValueError, match=r"refers to input dimension \[3\]"):
        L.ReshapeLayer((2, 3, 4), ([3], -1))
    with pytest.raises(ValueError, match="-1 at most once"):
        L.ReshapeLayer((2, 3, 4), (-1, -1))
    with pytest.raises(ValueError, match="must be positive or -1, got \\(0, 24\\)"):
        L.ReshapeLayer((2, 3, 4), (0, 24))
    with pytest.raises(ValueError, match="single-element lists .* got \\[0, 1\\]"):
        L.ReshapeLayer((2, 3, 4), ([0, 1], -1))
    with pytest.raises(ValueError, match="outdim=4 is more than the input's 3 dimensions"):
        L.get_output_shape(L.FlattenLayer((2, 3, 4), outdim=4))  # checked where the shape is known
    with pytest.raises(ValueError, match="outdim must be an int >= 1, got 0"):
        L.FlattenLayer((2, 3, 4), outdim=0)
    with pytest.raises(ValueError, match="drops a dimension of size != 1"):
        L.DimshuffleLayer((2, 3), (0,))


def test_elemwise_sum_and_concat():
    a, b, c = L.InputLayer((None, 3)), L.InputLayer((None, 3)), L.InputLayer((4, None))
    s1 = L.ElemwiseSumLayer([a, b])
    s2 = L.ElemwiseSumLayer([a, b, c], coeffs=[0.5, -1, 2])
    mx = L.ElemwiseMergeLayer([a, b], pt.maximum)
    cat0 = L.ConcatLayer([a, b], axis=0)
    cat1 = L.ConcatLayer([a, c], axis=-1)
    assert s2.output_shape == (4, 3) and cat0.output_shape == (None, 3) and cat1.output_shape == (4, None)
    assert L.ConcatLayer([a, b]).output_shape == (None, 6)
    f = pytensor.function([a.input_var, b.input_var, c.input_var], L.get_output([s1, s2, mx, cat0, cat1]))
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal((4, 3)).astype(floatX) for _ in range(3))
    got = f(x, y, z)
    np.testing.assert_allclose(got[0], x + y, rtol=1e-6)
    np.testing.assert_allclose(got[1], 0.5 * x - y + 2 * z, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[2], np.maximum(x, y))
    np.testing.assert_array_equal(got[3], np.concatenate([x, y], axis=0))
    np.testing.assert_array_equal(got[4], np.concatenate([x, z], axis=1))
    assert got[1].dtype == np.dtype(floatX)
    # shapes are checked where the output shape is asked for (as in Lasagne: the next layer's constructor)
    with pytest.raises(ValueError, match=r"input shapes must match, got \[\(None, 3\), \(None, 4\)\]"):
        L.DenseLayer(L.ElemwiseSumLayer([a, L.InputLayer((None, 4))]), 2)
    with pytest.raises(ValueError, match=r"got 3 coeffs \[1, 2, 3\] for 2 incomings"):
        L.ElemwiseSumLayer([a, b], coeffs=[1, 2, 3])
    with pytest.raises(ValueError, match="differ outside axis 1"):
        L.get_output_shape(L.ConcatLayer([L.InputLayer((2, 3)), L.InputLayer((3, 3))], axis=1))
    with pytest.raises(ValueError, match="cropping modes must be None, 'lower', 'center' or 'upper', got 'middle'"):
        L.get_output_shape(L.ConcatLayer([a, b], cropping=["middle", None]))


def test_pad_layer_matches_numpy_pad():
    rng = np.random.default_rng(7)
    l_in = L.InputLayer((None, 2, 3, 4))
    layers = [L.PadLayer(l_in, 1), L.PadLayer(l_in, [(0, 2), 1], val=-1.5), L.pad(l_in, [1, (2, 0), 0], batch_ndim=1),
              L.PadLayer(l_in, 0)]
    x = rng.standard_normal((2, 2, 3, 4)).astype(floatX)
    outs = pytensor.function([l_in.input_var], L.get_output(layers))(x)
    wants = [np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)]),
             np.pad(x, [(0, 0), (0, 0), (0, 2), (1, 1)], constant_values=-1.5),
             np.pad(x, [(0, 0), (1, 1), (2, 0), (0, 0)]), x]
    for layer, got, want in zip(layers, outs, wants):
        assert got.shape == (2,) + layer.output_shape[1:]
        np.testing.assert_array_equal(got, want)
    assert L.PadLayer((None, 3, None), (2,)).output_shape == (None, 3, None)
    # the widths are checked against the input where its shape is known (Lasagne: where the padding runs)
    with pytest.raises(ValueError, match=r"3 widths given for the 2 axes after the first 2 of a 4-dimensional input"):
        L.get_output_shape(L.PadLayer(l_in, [1, 2, 3]))
    with pytest.raises(ValueError, match=r"got \[\(1, -1\), 0\]"):
        L.PadLayer(l_in, [(1, -1), 0])
    with pytest.raises(ValueError, match="batch_ndim=5 is more than the input's 4 dimensions"):
        L.get_output(L.PadLayer(l_in, 1, batch_ndim=5))
    with pytest.raises(ValueError, match="batch_ndim must be an int >= 0, got -1"):
        L.PadLayer(l_in, 1, batch_ndim=-1)
    np.testing.assert_array_equal(L.pad_tensor(pt.as_tensor_variable(x[0, 0]), [(1, 0)], 7, batch_ndim=0).eval(),
                                  np.pad(x[0, 0], [(1, 0), (0, 0)], constant_values=7))


def test_expression_layer_shapes_and_values():
    rng = np.random.default_rng(8)
    l_in = L.InputLayer((None, 3, 4))
    same = L.ExpressionLayer(l_in, lambda x: 2 * x)
    auto = L.ExpressionLayer(l_in, lambda x: x.sum(axis=2), output_shape="auto")
    auto_concat = L.ExpressionLayer(l_in, lambda x: pt.concatenate([x, x], axis=0), output_shape="auto")
    given = L.ExpressionLayer(l_in, lambda x: x.reshape((x.shape[0], 12)), output_shape=(None, 12))
    computed = L.ExpressionLayer(l_in, lambda x: x[:, :2], output_shape=lambda s: (s[0], 2, s[2]))
    assert same.output_shape == (None, 3, 4)
    assert auto.output_shape == (None, 3)
    assert auto_concat.output_shape == (None, 3, 4)
    assert given.output_shape == (None, 12) and computed.output_shape == (None, 2, 4)
    x = rng.standard_normal((2, 3, 4)).astype(floatX)
    outs = pytensor.function([l_in.input_var], L.get_output([same, auto, given, computed]))(x)
    for got, want in zip(outs, [2 * x, x.sum(axis=2), x.reshape(2, 12), x[:, :2]]):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="function must be callable, got 3"):
        L.ExpressionLayer(l_in, 3)
    with pytest.raises(ValueError, match="output_shape must be None, a tuple, a callable or 'auto', got 'same'"):
        L.ExpressionLayer(l_in, abs, output_shape="same")


def test_slice_layer_and_autocrop_match_numpy():
    x = np.arange(30, dtype=floatX).reshape(3, 5, 2)
    l_in = L.InputLayer((None, 5, 2))
    layers = [L.SliceLayer(l_in, 0, axis=1), L.SliceLayer(l_in, slice(3, 5), axis=1), L.SliceLayer(l_in, -1)]
    outs = pytensor.function([l_in.input_var], L.get_output(layers))(x)
    for layer, got, want in zip(layers, outs, (x[:, 0], x[:, 3:5], x[:, :, -1])):
        np.testing.assert_array_equal(got, want)
        assert layer.output_shape == (None,) + want.shape[1:]
    with pytest.raises(ValueError, match="indices must be an int or a slice"):
        L.SliceLayer(l_in, [0, 1])

    a, b = np.arange(24.0).reshape(2, 3, 4), np.arange(10.0).reshape(1, 2, 5)
    got = [v.eval() for v in L.autocrop([a, b], [None, "upper", "center"])]
    np.testing.assert_array_equal(got[0], a[:, 1:, 0:4])
    np.testing.assert_array_equal(got[1], b[:, :, 0:4])
    assert L.autocrop_array_shapes([(2, 3, 4), (None, 2, 5)], ["lower", "upper"]) == [(None, 2, 4), (None, 2, 5)]
    cat = L.ConcatLayer([L.InputLayer((None, 3, 4)), L.InputLayer((None, 2, 5))], axis=1,
                        cropping=[None, None, "lower"])
    assert cat.output_shape == (None, 5, 4)
    summed = L.ElemwiseSumLayer([(2, 3, 4), (1, 2, 5)], cropping=["lower"] * 3)
    np.testing.assert_array_equal(summed.get_output_for([a, b]).eval(), a[:1, :2, :4] + b[:, :, :4])
