"""LocallyConnected2DLayer (lasagne.layers.local), NINLayer and EmbeddingLayer against explicit-loop NumPy."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L

floatX = pytensor.config.floatX


def numpy_locally_connected(x, W, channelwise):
    """'same' padding, stride 1, one filter per output position; W's taps taken as a cross-correlation."""
    n, c, rows, cols = x.shape
    fh, fw = W.shape[-4:-2]
    padded = np.pad(x, [(0, 0), (0, 0), (fh // 2, fh // 2), (fw // 2, fw // 2)])
    out = np.zeros((n, W.shape[0], rows, cols))
    for f in range(W.shape[0]):
        for i in range(rows):
            for j in range(cols):
                if channelwise:
                    out[:, f, i, j] = (padded[:, f, i:i + fh, j:j + fw] * W[f, :, :, i, j]).sum(axis=(1, 2))
                else:
                    out[:, f, i, j] = (padded[:, :, i:i + fh, j:j + fw] * W[f, :, :, :, i, j]).sum(axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("channelwise", [False, True])
def test_locally_connected_matches_numpy(channelwise):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 5)).astype(floatX)
    kw = dict(untie_biases=True, b=L.init.Normal(1.0), nonlinearity=None, channelwise=channelwise)
    layers = [L.LocallyConnected2DLayer((None, 3, 4, 5), 3, (3, 5), flip_filters=flip, **kw) for flip in (False, True)]
    xv = pt.tensor4("x")
    outs = pytensor.function([xv], [layer.get_output_for(xv) for layer in layers])(x)
    for layer, got in zip(layers, outs):
        W, b = layer.W.get_value(), layer.b.get_value()
        if layer.flip_filters:
            W = W[..., ::-1, ::-1, :, :]
        assert got.shape == (2,) + layer.output_shape[1:]
        np.testing.assert_allclose(got, numpy_locally_connected(x, W, channelwise) + b, rtol=1e-4, atol=1e-5)


def test_locally_connected_errors():
    with pytest.raises(NotImplementedError, match="requires pad='same', but got 1"):
        L.LocallyConnected2DLayer((None, 2, 4, 4), 2, 3, pad=1)
    with pytest.raises(NotImplementedError, match="requires stride=1 / \\(1, 1\\), but got 2"):
        L.LocallyConnected2DLayer((None, 2, 4, 4), 2, 3, stride=2)
    with pytest.raises(ValueError, match="requires a fixed input shape .* Got \\(None, 2, None, 4\\)"):
        L.LocallyConnected2DLayer((None, 2, None, 4), 2, 3)
    with pytest.raises(ValueError, match="num_filters=4 and 2 input channels"):
        L.LocallyConnected2DLayer((None, 2, 4, 4), 4, 3, channelwise=True)


def test_nin_layer_is_a_dense_layer_over_the_channels():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 4, 5)).astype(floatX)
    tied = L.NINLayer((None, 3, 4, 5), 6, b=L.init.Normal(1.0), nonlinearity=None)
    untied = L.NINLayer((None, 3, 4, 5), 6, untie_biases=True, b=L.init.Normal(1.0))
    xv = pt.tensor4("x")
    got_tied, got_untied = pytensor.function([xv], [tied.get_output_for(xv), untied.get_output_for(xv)])(x)
    want = np.einsum("nchw,cu->nuhw", x, tied.W.get_value()) + tied.b.get_value()[:, None, None]
    np.testing.assert_allclose(got_tied, want, rtol=1e-4, atol=1e-5)
    want = np.maximum(np.einsum("nchw,cu->nuhw", x, untied.W.get_value()) + untied.b.get_value(), 0)
    np.testing.assert_allclose(got_untied, want, rtol=1e-4, atol=1e-5)
    assert tied.output_shape == (None, 6, 4, 5) and untied.b.get_value().shape == (6, 4, 5)


def test_embedding_looks_rows_up():
    table = np.arange(12, dtype=floatX).reshape(4, 3)
    l_in = L.InputLayer((None, 2), input_var=pt.imatrix("words"))
    layer = L.EmbeddingLayer(l_in, input_size=4, output_size=3, W=table)
    words = np.array([[3, 0], [1, 1]], "int32")
    assert layer.output_shape == (None, 2, 3)
    np.testing.assert_array_equal(L.get_output(layer).eval({l_in.input_var: words}), table[words])
    with pytest.raises(ValueError, match="output_size must be a positive int, got 0"):
        L.EmbeddingLayer(l_in, 4, 0)
