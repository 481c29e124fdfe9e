"""Behaviours that Lasagne's own test suite found wrong or missing (issue #24), each against numpy or Lasagne's spec."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L
from theanompi.backend.ops.conv_nd import conv_nd

FX = pytensor.config.floatX


def output(layer, x):
    """The layer's output for the array ``x`` (layers built from a shape have no InputLayer)."""
    return layer.get_output_for(pt.as_tensor_variable(x)).eval()


def test_binary_losses_align_a_target_vector_with_a_one_unit_output():
    p = pt.tensor("p", shape=(None, 1))
    t = pt.vector("t")
    probs = np.array([[0.9], [0.2], [0.6]], FX)
    targets = np.array([1, 0, 0], FX)
    loss = L.objectives.binary_crossentropy(p, t).eval({p: probs, t: targets})
    assert loss.shape == (3, 1)  # not (3, 3)
    np.testing.assert_allclose(loss[:, 0], -np.log([0.9, 0.8, 0.4]), rtol=1e-5)
    assert L.objectives.squared_error(p, t).eval({p: probs, t: targets}).shape == (3, 1)
    np.testing.assert_array_equal(L.objectives.binary_accuracy(p, t).eval({p: probs, t: targets})[:, 0], [1, 1, 0])


def test_hinge_and_huber_losses_match_numpy():
    p, y = pt.matrix("p"), pt.ivector("y")
    scores = np.array([[3.0, 1.0, 2.5], [0.0, 2.0, 1.5]], FX)
    labels = np.array([0, 2], "int32")
    others = np.where(np.eye(3, dtype=bool)[labels], -np.inf, scores).max(axis=1)
    expected = np.maximum(others - scores[[0, 1], labels] + 1, 0)
    np.testing.assert_allclose(L.objectives.multiclass_hinge_loss(p, y).eval({p: scores, y: labels}), expected)
    a, b = pt.vector("a"), pt.vector("b")
    d = np.array([0.2, -3.0], FX)
    np.testing.assert_allclose(L.objectives.huber_loss(a, b).eval({a: d, b: np.zeros(2, FX)}), [0.02, 2.5], rtol=1e-5)


def test_get_output_passes_only_the_keywords_given():
    class NoKwargs(L.Layer):
        def get_output_for(self, input):  # a custom layer without **kwargs, as Lasagne allows
            return 2 * input

    net = NoKwargs(L.InputLayer((None, 3)))
    x = np.ones((1, 3), FX)
    np.testing.assert_array_equal(L.get_output(net).eval({L.get_all_layers(net)[0].input_var: x}), 2 * x)
    with pytest.warns(UserWarning, match="unused kwargs: determinstic .perhaps you meant deterministic."):
        L.get_output(L.DropoutLayer(L.InputLayer((None, 3))), determinstic=True)


def test_rng_is_a_random_state_and_input_vars_keep_broadcastability():
    from theanompi.lasagne import random

    saved = random.get_rng()
    try:
        random.set_rng(3)
        assert isinstance(random.get_rng(), np.random.RandomState)
        random.get_rng().seed(1)
    finally:
        random.set_rng(saved)
    assert L.InputLayer((1, 2)).input_var.broadcastable == (True, False)


def test_layers_take_any_object_with_output_shape():
    class Wrapper:  # not a Layer: a user's wrapper with an output shape
        def __init__(self, layer):
            self.layer, self.output_shape, self.input_layer = layer, layer.output_shape, layer

    l_in = L.InputLayer((None, 4))
    dense = L.DenseLayer(Wrapper(l_in), 3)
    merged = L.ElemwiseSumLayer([Wrapper(l_in), l_in])
    assert dense.output_shape == (None, 3) and merged.output_shape == (None, 4)
    assert l_in in L.get_all_layers(dense)
    with pytest.raises(ValueError, match="an incoming must be a layer .anything with output_shape. or a shape tuple"):
        L.DenseLayer(object(), 3)


def test_symbolic_output_shapes_are_refused_and_free_layers_name_the_problem():
    class Symbolic(L.Layer):
        def get_output_shape_for(self, input_shape):
            return (pt.iscalar(),)

    with pytest.raises(ValueError, match="returned a symbolic output shape"):
        _ = Symbolic((None,)).output_shape
    with pytest.raises(ValueError, match="free-floating layer <MergeLayer>"):
        L.get_output(L.MergeLayer([(None, 2), L.InputLayer((None, 2))]))


def test_batch_norm_statistics_are_tagged():
    bn = L.BatchNormLayer((None, 3))
    assert L.get_all_params(bn, batch_norm_stat=True) == [bn.mean, bn.inv_std]


def test_lasagne_special_has_nonlinearity_layer():
    from theanompi.lasagne.layers import special

    assert special.NonlinearityLayer is L.NonlinearityLayer


def numpy_pool(x, k, s, p, reduce, fill):
    padded = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=fill)
    rows = (padded.shape[2] - k[0]) // s[0] + 1
    cols = (padded.shape[3] - k[1]) // s[1] + 1
    return np.array([[reduce(padded[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]], axis=(2, 3))
                      for j in range(cols)] for i in range(rows)]).transpose(2, 3, 0, 1)


def test_max_pool_takes_a_pad_up_to_the_window_less_one():
    x = np.random.default_rng(0).normal(size=(2, 3, 7, 6)).astype(FX)
    layer = L.MaxPool2DLayer((None, 3, 7, 6), 3, stride=2, pad=2)
    out = output(layer, x)
    assert out.shape == layer.get_output_shape_for(x.shape)
    np.testing.assert_array_equal(out, numpy_pool(x, (3, 3), (2, 2), (2, 2), np.max, -np.inf))
    avg = L.Pool2DLayer((None, 3, 7, 6), 3, stride=2, pad=2, mode="average_inc_pad")
    np.testing.assert_allclose(output(avg, x), numpy_pool(x, (3, 3), (2, 2), (2, 2), np.mean, 0),
                               rtol=1e-5, atol=1e-6)


def test_pool_1d_3d_upscale_feature_pool_and_wta_match_numpy():
    rng = np.random.default_rng(1)
    x3 = rng.normal(size=(2, 4, 9)).astype(FX)
    np.testing.assert_array_equal(output(L.MaxPool1DLayer((None, 4, 9), 3, stride=2), x3),
                                  numpy_pool(x3[..., None], (3, 1), (2, 1), (0, 0), np.max, 0)[..., 0])
    x5 = rng.normal(size=(1, 2, 4, 4, 6)).astype(FX)
    want = x5.reshape(1, 2, 2, 2, 2, 2, 3, 2).max(axis=(3, 5, 7))
    np.testing.assert_array_equal(output(L.MaxPool3DLayer((None, 2, 4, 4, 6), 2), x5), want)
    x4 = rng.normal(size=(1, 2, 2, 3)).astype(FX)
    np.testing.assert_array_equal(output(L.Upscale2DLayer((None, 2, 2, 3), (2, 1)), x4),
                                  x4.repeat(2, axis=2))
    dilated = output(L.Upscale1DLayer((None, 4, 9), 2, mode="dilate"), x3)
    np.testing.assert_array_equal(dilated[..., ::2], x3)
    assert not dilated[..., 1::2].any()
    x2 = rng.normal(size=(3, 6)).astype(FX)
    np.testing.assert_array_equal(output(L.FeaturePoolLayer((None, 6), 3), x2),
                                  x2.reshape(3, 2, 3).max(axis=2))
    wta = output(L.FeatureWTALayer((None, 6), 3), x2)
    np.testing.assert_array_equal(wta, np.where(x2 == x2.reshape(3, 2, 3).max(axis=2).repeat(3, axis=1), x2, 0))
    spp = L.SpatialPyramidPoolingLayer((None, 2, 2, 3), pool_dims=[1])
    np.testing.assert_array_equal(output(spp, x4)[..., 0], x4.max(axis=(2, 3)))


def test_conv_layers_1d_3d_dilated_and_transposed():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 4, 7)).astype(FX)
    # the layers wire conv_nd (checked against numpy in tests/backend/test_conv_nd.py) with their W layouts
    conv1 = L.Conv1DLayer((None, 4, 7), 6, 3, pad="same", num_groups=2, nonlinearity=None)
    want = conv_nd(x.astype("float64"), conv1.W.get_value().astype("float64"), pad=1, groups=2).eval()
    np.testing.assert_allclose(output(conv1, x), want, rtol=1e-4, atol=1e-5)
    dil = L.DilatedConv2DLayer((None, 2, 7, 7), 3, 3, dilation=2, nonlinearity=None)
    x2 = rng.normal(size=(1, 2, 7, 7)).astype(FX)
    want = conv_nd(x2.astype("float64"), dil.W.get_value().transpose(1, 0, 2, 3).astype("float64"), dilation=2).eval()
    np.testing.assert_allclose(output(dil, x2), want, rtol=1e-4, atol=1e-5)
    conv3 = L.Conv3DLayer((None, 2, 4, 5, 5), 3, 3, pad=1)
    assert output(conv3, rng.normal(size=(1, 2, 4, 5, 5)).astype(FX)).shape == (1, 3, 4, 5, 5)
    deconv = L.TransposedConv2DLayer((None, 2, 3, 3), 1, 3, stride=2)
    assert deconv.get_output_for(np.ones((1, 2, 3, 3), FX)).eval().shape == (1, 1, 7, 7)  # an ndarray input
    assert output(L.TransposedConv3DLayer((None, 2, 2, 2, 2), 1, 3, stride=2),
                  np.ones((1, 2, 2, 2, 2), FX)).shape == (1, 1, 5, 5, 5)


@pytest.mark.parametrize("mode, reduce, fill", [("max", np.max, -np.inf), ("average_inc_pad", np.mean, 0)])
def test_pool_2d_takes_window_sizes_known_only_at_run_time(mode, reduce, fill):
    x = np.random.default_rng(3).normal(size=(2, 3, 7, 6)).astype(FX)
    xv, ws, stride = pt.tensor4("x"), pt.ivector("ws"), pt.ivector("stride")
    f = pytensor.function([xv, ws, stride], L.pool_2d(xv, ws, stride=stride, pad=(1, 0), mode=mode))
    for k, s in (((3, 2), (2, 2)), ((2, 4), (1, 3))):
        np.testing.assert_allclose(f(x, k, s), numpy_pool(x, k, s, (1, 0), reduce, fill), rtol=1e-5, atol=1e-6)
    exc = L.pool_2d(xv, (ws[0], 2), pad=(1, 1), mode="average_exc_pad").eval({xv: x, ws: [3, 0]})
    counts = numpy_pool(np.ones_like(x), (3, 2), (3, 2), (1, 1), np.sum, 0)
    np.testing.assert_allclose(exc, numpy_pool(x, (3, 2), (3, 2), (1, 1), np.sum, 0) / counts, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="symbolic window sizes or strides need ignore_border=True"):
        L.pool_2d(xv, ws, ignore_border=False)


def test_lasagne_built_models_run_on_our_ops():
    """Issue #24 item 4: a network written with Lasagne's names runs its convolutions, pooling and batch norm on
    the C ops (convolution and bias in one op) wherever the sizes are known when the graph is built."""
    from pytensor.graph.traversal import ancestors

    from theanompi import lasagne
    from theanompi.backend.ops import BatchNormTrain, Conv2d, Pool2d

    net = lasagne.layers.InputLayer((None, 3, 8, 8))
    conv = lasagne.layers.Conv2DLayer(net, 4, 3, pad="same")
    net = lasagne.layers.batch_norm(lasagne.layers.Conv2DLayer(conv, 4, 3, pad=1))
    net = lasagne.layers.MaxPool2DLayer(net, 2)
    conv1d = lasagne.layers.Conv1DLayer(lasagne.layers.InputLayer((None, 3, 9)), 2, 3)
    conv3d = lasagne.layers.Conv3DLayer(lasagne.layers.InputLayer((None, 2, 4, 4, 4)), 2, 3)
    ops = [{type(v.owner.op) for v in ancestors([out]) if v.owner is not None}
           for out in lasagne.layers.get_output([net, conv1d, conv3d])]
    assert {Conv2d, BatchNormTrain, Pool2d} <= ops[0] and Conv2d in ops[1] and Conv2d in ops[2]
    graph = ancestors([lasagne.layers.get_output(conv)])
    fused = [v.owner for v in graph if v.owner is not None and isinstance(v.owner.op, Conv2d)]
    assert len(fused) == 1 and conv.b in fused[0].inputs  # the bias is added inside the convolution op
