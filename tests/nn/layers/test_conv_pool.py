"""Conv2DLayer and the pooling layers against explicit-loop NumPy references; conv gradients by finite differences."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad
from pytensor.graph.replace import clone_replace

import theanompi.nn as L

floatX = pytensor.config.floatX


def ref_conv(x, w, stride, pad, flip=False):
    """Explicit loops: y[n,o,i,j] = sum_{c,a,b} w[o,c,a,b] * xpad[n,c,i*sh+a,j*sw+b] (w flipped if flip)."""
    if flip:
        w = w[:, :, ::-1, ::-1]
    (sh, sw), (ph, pw) = stride, pad
    N, C, H, W = x.shape
    n_out, _, kh, kw = w.shape
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    y = np.zeros((N, n_out, Ho, Wo))
    for n in range(N):
        for o in range(n_out):
            for i in range(Ho):
                for j in range(Wo):
                    for c in range(C):
                        for a in range(kh):
                            for b in range(kw):
                                y[n, o, i, j] += w[o, c, a, b] * xp[n, c, i * sh + a, j * sw + b]
    return y


def ref_pool(x, pool, stride, pad, mode):
    (kh, kw), (sh, sw), (ph, pw) = pool, stride, pad
    N, C, H, W = x.shape
    fill = -np.inf if mode == "max" else 0.0
    xp = np.full((N, C, H + 2 * ph, W + 2 * pw), fill)
    xp[:, :, ph:ph + H, pw:pw + W] = x
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            win = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
            y[:, :, i, j] = win.max(axis=(2, 3)) if mode == "max" else win.sum(axis=(2, 3)) / (kh * kw)
    return y


def test_conv_layers_match_loops():
    L.init.set_rng(0)
    rng = np.random.default_rng(0)
    l_in = L.InputLayer((None, 3, 7, 6))
    b = L.init.Normal(1.0)
    cases = {
        "same": (L.Conv2DLayer(l_in, 4, 3, pad="same", b=b, nonlinearity=None), (1, 1), (1, 1), False),
        "stride2_pad1": (L.Conv2DLayer(l_in, 5, (3, 2), stride=2, pad=1, b=b, nonlinearity=None), (2, 2), (1, 1),
                         False),
        "valid": (L.Conv2DLayer(l_in, 2, 4, pad="valid", b=b, nonlinearity=None), (1, 1), (0, 0), False),
        "full": (L.Conv2DLayer(l_in, 2, (2, 3), pad="full", b=b, nonlinearity=None), (1, 1), (1, 2), False),
        "flip": (L.Conv2DLayer(l_in, 3, 3, stride=(1, 2), pad=(0, 1), flip_filters=True, b=b, nonlinearity=None),
                 (1, 2), (0, 1), True),
        "relu": (L.Conv2DLayer(l_in, 3, 3, b=b), (1, 1), (0, 0), False),
    }
    untied = L.Conv2DLayer(l_in, 2, 3, pad=1, untie_biases=True, b=L.init.Normal(1.0), nonlinearity=None)
    nobias = L.Conv2DLayer(l_in, 2, 3, b=None, nonlinearity=None)
    layers = [c[0] for c in cases.values()] + [untied, nobias]
    f = pytensor.function([l_in.input_var], L.get_output(layers))
    x = rng.standard_normal((2, 3, 7, 6)).astype(floatX)
    outs = f(x)
    for (name, (layer, stride, pad, flip)), got in zip(cases.items(), outs):
        W, bias = layer.W.get_value().astype(np.float64), layer.b.get_value().astype(np.float64)
        want = ref_conv(x.astype(np.float64), W, stride, pad, flip) + bias[None, :, None, None]
        if name == "relu":
            want = np.maximum(want, 0)
        assert got.shape == want.shape == (2,) + layer.output_shape[1:], name
        assert got.dtype == np.dtype(floatX)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    assert untied.b.get_value().shape == (2, 7, 6)
    want = ref_conv(x, untied.W.get_value(), (1, 1), (1, 1)) + untied.b.get_value()[None]
    np.testing.assert_allclose(outs[-2], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[-1], ref_conv(x, nobias.W.get_value(), (1, 1), (0, 0)), rtol=1e-4, atol=1e-4)
    assert [p.name for p in L.get_all_params(nobias)] == ["W"]
    assert cases["same"][0].output_shape == (None, 4, 7, 6)
    assert cases["full"][0].output_shape == (None, 2, 8, 8)
    assert L.get_output_shape(cases["stride2_pad1"][0], (9, 3, 11, 11)) == (9, 5, 6, 6)


def test_conv_gradient_float64():
    with pytensor.config.change_flags(floatX="float64"):
        L.init.set_rng(1)
        l_in = L.InputLayer((None, 2, 5, 5))
        layer = L.Conv2DLayer(l_in, 3, 3, stride=2, pad=1, b=L.init.Normal(0.5), nonlinearity=L.nonlinearities.tanh,
                              flip_filters=True)
        out = L.get_output(layer)

        def fun(x, w, b):
            return clone_replace(out, {l_in.input_var: x, layer.W: w, layer.b: b})

        rng = np.random.default_rng(0)
        verify_grad(fun, [rng.standard_normal((2, 2, 5, 5)), layer.W.get_value(), layer.b.get_value()], rng=rng)


def test_pool_layers_match_loops():
    rng = np.random.default_rng(2)
    l_in = L.InputLayer((None, 2, 7, 8))
    cases = [
        (L.MaxPool2DLayer(l_in, 2), (2, 2), (2, 2), (0, 0), "max"),
        (L.MaxPool2DLayer(l_in, 3, stride=2, pad=1), (3, 3), (2, 2), (1, 1), "max"),
        (L.MaxPool2DLayer(l_in, (2, 3), stride=(1, 2)), (2, 3), (1, 2), (0, 0), "max"),
        (L.Pool2DLayer(l_in, 3, stride=2, pad=1, mode="average_inc_pad"), (3, 3), (2, 2), (1, 1), "avg"),
    ]
    gmean, gmax = L.GlobalPoolLayer(l_in), L.GlobalPoolLayer(l_in, pool_function=pt.max)
    f = pytensor.function([l_in.input_var], L.get_output([c[0] for c in cases] + [gmean, gmax]))
    x = rng.standard_normal((3, 2, 7, 8)).astype(floatX)
    outs = f(x)
    for (layer, pool, stride, pad, mode), got in zip(cases, outs):
        want = ref_pool(x.astype(np.float64), pool, stride, pad, mode)
        assert got.shape == want.shape == (3,) + layer.output_shape[1:]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[-2], x.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[-1], x.max(axis=(2, 3)))
    assert gmean.output_shape == (None, 2)
    assert cases[1][0].output_shape == (None, 2, 4, 4)


def test_conv_and_pool_errors_quote_values():
    l_in = L.InputLayer((None, 3, 8, 8))
    with pytest.raises(NotImplementedError, match=r"pad='same' requires odd filter size, got filter_size=\(4, 4\)"):
        L.Conv2DLayer(l_in, 2, 4, pad="same")
    with pytest.raises(TypeError, match="pad='half' is not allowed; use an int or an iterable of int"):
        L.Conv2DLayer(l_in, 2, 3, pad="half")
    with pytest.raises(ValueError, match=r"Expected 4 input dimensions .* got input shape \(None, 8\)"):
        L.Conv2DLayer(L.InputLayer((None, 8)), 2, 3)
    with pytest.raises(ValueError, match="number of input channels must be known"):
        L.Conv2DLayer(L.InputLayer((None, None, 8, 8)), 2, 3)
    with pytest.raises(ValueError, match="filter size 9 is larger than the padded input 8"):
        L.Conv2DLayer(l_in, 2, 9)
    with pytest.raises(ValueError, match="stride must be >= 1, got 0"):
        L.Conv2DLayer(l_in, 2, 3, stride=0)
    with pytest.raises(ValueError, match="num_filters must be a positive int, got 2.5"):
        L.Conv2DLayer(l_in, 2.5, 3)
    with pytest.raises(ValueError, match=r"ignore_border=False needs pad=0 \(as in Lasagne\), got pad=1"):
        L.MaxPool2DLayer(l_in, 2, pad=1, ignore_border=False)
    with pytest.raises(ValueError, match="Mode must be either 'max', .* Got 'average'"):
        L.Pool2DLayer(l_in, 2, mode="average")
    with pytest.raises(ValueError, match=r"pad must be smaller than pool_size, got pad=\(3, 3\)"):
        L.MaxPool2DLayer(l_in, 3, pad=3)


def ref_transposed_conv(x, w, stride, crop, out_size, flip_filters=True):
    """Explicit scatter: full[n, f, i*sh+a, j*sw+b] += x[n, c, i, j] * w[c, f, a, b]; then crop top/left."""
    if not flip_filters:
        w = w[:, :, ::-1, ::-1]
    (sh, sw), (ph, pw) = stride, crop
    N, C, H, W = x.shape
    _, F, kh, kw = w.shape
    full = np.zeros((N, F, max((H - 1) * sh + kh, ph + out_size[0]), max((W - 1) * sw + kw, pw + out_size[1])))
    for n in range(N):
        for c in range(C):
            for i in range(H):
                for j in range(W):
                    for f in range(F):
                        full[n, f, i * sh:i * sh + kh, j * sw:j * sw + kw] += x[n, c, i, j] * w[c, f]
    return full[:, :, ph:ph + out_size[0], pw:pw + out_size[1]]


def test_transposed_conv_matches_scatter_reference():
    L.init.set_rng(3)
    rng = np.random.default_rng(3)
    l_in = L.InputLayer((None, 3, 4, 5))
    b = L.init.Normal(1.0)
    cases = {  # layer, stride, crop, flip_filters
        "stride1": (L.TransposedConv2DLayer(l_in, 2, 3, b=b, nonlinearity=None), (1, 1), (0, 0), True),
        "same_s2_size": (L.TransposedConv2DLayer(l_in, 4, 5, stride=2, crop="same", output_size=(8, 10), b=b,
                                                 nonlinearity=None), (2, 2), (2, 2), True),
        "same_s2_min": (L.Deconv2DLayer(l_in, 2, 3, stride=2, crop="same", b=b, nonlinearity=None), (2, 2), (1, 1),
                        True),
        "full_asym": (L.TransposedConv2DLayer(l_in, 2, (3, 2), stride=(1, 2), crop="full", b=b, nonlinearity=None),
                      (1, 2), (2, 1), True),
        "lasagne_flip": (L.TransposedConv2DLayer(l_in, 3, 3, stride=2, crop=1, flip_filters=False, b=b,
                                                 nonlinearity=None), (2, 2), (1, 1), False),
        "relu": (L.TransposedConv2DLayer(l_in, 2, 2, stride=2, b=b), (2, 2), (0, 0), True),
    }
    untied = L.TransposedConv2DLayer(l_in, 2, 3, crop=1, untie_biases=True, b=L.init.Normal(1.0), nonlinearity=None)
    layers = [c[0] for c in cases.values()] + [untied]
    f = pytensor.function([l_in.input_var], L.get_output(layers))
    x = rng.standard_normal((2, 3, 4, 5)).astype(floatX)
    outs = f(x)
    for (name, (layer, stride, crop, flip)), got in zip(cases.items(), outs):
        W, bias = layer.W.get_value().astype(np.float64), layer.b.get_value().astype(np.float64)
        want = ref_transposed_conv(x.astype(np.float64), W, stride, crop, layer.output_shape[2:], flip)
        want = want + bias[None, :, None, None]
        if name == "relu":
            want = np.maximum(want, 0)
        assert got.shape == want.shape == (2,) + layer.output_shape[1:], name
        assert got.dtype == np.dtype(floatX)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    want = ref_transposed_conv(x, untied.W.get_value(), (1, 1), (1, 1), (4, 5)) + untied.b.get_value()[None]
    np.testing.assert_allclose(outs[-1], want, rtol=1e-4, atol=1e-4)
    assert cases["same_s2_min"][0].output_shape == (None, 2, 7, 9)
    assert cases["same_s2_size"][0].W.get_value().shape == (3, 4, 5, 5)
    assert cases["full_asym"][0].output_shape == (None, 2, 2, 8)
    assert L.get_output_shape(cases["stride1"][0], (7, 3, 6, 6)) == (7, 2, 8, 8)


def test_transposed_conv_is_the_transpose_of_conv():
    """<conv2d(y, W), x> == <transposed(x, W), y>: the layers are adjoint for the same W, stride and pad=crop."""
    L.init.set_rng(4)
    rng = np.random.default_rng(4)
    up = L.TransposedConv2DLayer((None, 4, 5, 5), 3, 3, stride=2, crop=1, output_size=10, b=None, nonlinearity=None)
    for conv_flip in (False, True):
        down = L.Conv2DLayer((None, 3, 10, 10), 4, 3, stride=2, pad=1, W=up.W, b=None, nonlinearity=None,
                             flip_filters=conv_flip)
        up.flip_filters = not conv_flip
        x, y = pt.tensor4("x"), pt.tensor4("y")
        f = pytensor.function([x, y], [pt.sum(down.get_output_for(y) * x), pt.sum(up.get_output_for(x) * y)])
        a, b = f(rng.standard_normal((2, 4, 5, 5)).astype(floatX), rng.standard_normal((2, 3, 10, 10)).astype(floatX))
        np.testing.assert_allclose(a, b, rtol=1e-4)
        assert down.output_shape[2:] == up.input_shape[2:]


def test_transposed_conv_gradient_float64():
    with pytensor.config.change_flags(floatX="float64"):
        L.init.set_rng(5)
        l_in = L.InputLayer((None, 2, 3, 4))
        layer = L.TransposedConv2DLayer(l_in, 3, 3, stride=2, crop="same", output_size=(6, 8), b=L.init.Normal(0.5),
                                        nonlinearity=L.nonlinearities.tanh, flip_filters=False)
        out = L.get_output(layer)

        def fun(x, w, b):
            return clone_replace(out, {l_in.input_var: x, layer.W: w, layer.b: b})

        rng = np.random.default_rng(0)
        verify_grad(fun, [rng.standard_normal((2, 2, 3, 4)), layer.W.get_value(), layer.b.get_value()], rng=rng)


def test_transposed_conv_errors_quote_values():
    l_in = L.InputLayer((None, 3, 7, 7))
    with pytest.raises(ValueError, match=r"output_size=\(16, 16\) is impossible for input shape \(None, 3, 7, 7\)"):
        L.TransposedConv2DLayer(l_in, 2, 5, stride=2, crop="same", output_size=16)
    with pytest.raises(NotImplementedError, match=r"crop='same' requires odd filter size"):
        L.TransposedConv2DLayer(l_in, 2, 4, crop="same")
    with pytest.raises(ValueError, match="crop 4 leaves no output"):
        L.TransposedConv2DLayer(L.InputLayer((None, 3, 1, 1)), 2, 5, crop="full")
    with pytest.raises(ValueError, match="output_size must be >= 1"):
        L.TransposedConv2DLayer(l_in, 2, 3, output_size=(0, 9))
    with pytest.raises(ValueError, match=r"Expected 4 input dimensions .* got input shape \(None, 8\)"):
        L.TransposedConv2DLayer(L.InputLayer((None, 8)), 2, 3)
    with pytest.raises(ValueError, match="num_filters must be a positive int, got 0"):
        L.TransposedConv2DLayer(l_in, 0, 3)


def ref_pool_clipped(x, pool, stride, pad, mode, n_out):
    """Theano's rule: window [i*s, i*s+k) of the padded input, clipped at its end; 'average_exc_pad' also
    clips off the padding; the mean is over what is left ('average_inc_pad' counts padding, not overhang)."""
    (kh, kw), (sh, sw), (ph, pw) = pool, stride, pad
    N, C, H, W = x.shape
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    y = np.zeros((N, C) + n_out)
    for i in range(n_out[0]):
        for j in range(n_out[1]):
            r0, r1 = i * sh, min(i * sh + kh, H + 2 * ph)
            c0, c1 = j * sw, min(j * sw + kw, W + 2 * pw)
            if mode != "average_inc_pad":
                r0, r1, c0, c1 = max(r0, ph), min(r1, H + ph), max(c0, pw), min(c1, W + pw)
            win = xp[:, :, r0:r1, c0:c1]
            y[:, :, i, j] = win.max(axis=(2, 3)) if mode == "max" else win.mean(axis=(2, 3))
    return y


def test_pool_ignore_border_false_and_average_exc_pad_match_loops():
    rng = np.random.default_rng(10)
    l_in = L.InputLayer((None, 2, 7, 6))
    cases = [  # layer, pool, stride, pad, mode
        (L.MaxPool2DLayer(l_in, 2, ignore_border=False), (2, 2), (2, 2), (0, 0), "max"),
        (L.MaxPool2DLayer(l_in, 3, stride=2, ignore_border=False), (3, 3), (2, 2), (0, 0), "max"),
        (L.Pool2DLayer(l_in, (3, 2), stride=(3, 4), ignore_border=False, mode="average_inc_pad"), (3, 2), (3, 4),
         (0, 0), "average_inc_pad"),
        (L.Pool2DLayer(l_in, 3, stride=2, ignore_border=False, mode="average_exc_pad"), (3, 3), (2, 2), (0, 0),
         "average_exc_pad"),
        (L.Pool2DLayer(l_in, 3, stride=2, pad=1, mode="average_exc_pad"), (3, 3), (2, 2), (1, 1), "average_exc_pad"),
        (L.Pool2DLayer(l_in, (7, 6), stride=1, mode="average_exc_pad"), (7, 6), (1, 1), (0, 0), "average_exc_pad"),
    ]
    x = rng.standard_normal((2, 2, 7, 6)).astype(floatX)
    outs = pytensor.function([l_in.input_var], L.get_output([c[0] for c in cases]))(x)
    for (layer, pool, stride, pad, mode), got in zip(cases, outs):
        want = ref_pool_clipped(x.astype(np.float64), pool, stride, pad, mode, layer.output_shape[2:])
        assert got.shape == (2,) + layer.output_shape[1:], (layer, got.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{pool} {stride} {pad} {mode}")
    assert [c[0].output_shape[2:] for c in cases] == [(4, 3), (3, 3), (3, 2), (3, 3), (4, 3), (1, 1)]
    # Lasagne's lengths for ignore_border=False: resnet50's 3x3/2 pooling of 112 gives 56 (55 with whole windows).
    assert L.pool_output_length(112, 3, 2, 0, ignore_border=False) == 56
    assert L.pool_output_length(112, 3, 2, 0) == 55
    with pytensor.config.change_flags(floatX="float64"):
        for layer in (L.Pool2DLayer((None, 1, 5, 5), 2, ignore_border=False, mode="average_exc_pad"),
                      L.MaxPool2DLayer((None, 1, 5, 5), 2, ignore_border=False)):
            verify_grad(layer.get_output_for, [rng.standard_normal((2, 1, 5, 5))], rng=rng)
