"""theanompi.models.layers2 (Theano-MPI's layer module): forward passes against NumPy, gradients by finite
differences, training/validation switches, parameter helpers, and a cifar10.py-style CNN that learns."""


import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad
from pytensor.graph.replace import graph_replace

from theanompi.models import current_config, layers2
from theanompi.models.contract import WorkerConfig
from theanompi.models.layers2 import (
    FC,
    LRN,
    BatchNormal,
    Constant,
    Conv,
    ConvPoolLRN,
    ConvPoolLRN_bc01,
    Crop,
    Dimshuffle,
    Dropout,
    Flatten,
    Normal,
    Pool,
    Softmax,
    Subtract,
    count_params,
    extract_weight_types,
    get_layers,
    get_params,
)
from theanompi.models.layers2.conv import pool_bc01

floatX = pytensor.config.floatX
RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def training_mode():
    """Every test starts and ends with random crops and dropout on (they are class-wide switches)."""
    Crop.SetRandCropOn()
    Dropout.SetDropoutOn()
    yield
    Crop.SetRandCropOn()
    Dropout.SetDropoutOn()


def rand(*shape):
    return RNG.standard_normal(shape).astype(floatX)


def fn(inputs, outputs):
    return pytensor.function(inputs, outputs)


# --------------------------------------------------------------------------- NumPy references
def ref_conv(x, w, stride, pad):
    """True convolution (flipped filters), bc01 / (out, in, kh, kw)."""
    w = w[:, :, ::-1, ::-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = xp.shape
    o, _, kh, kw = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    y = np.zeros((n, o, ho, wo))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return y


def ref_pool(x, k, s, p, mode, ignore_border=True):
    n, c, h, w = x.shape
    fill = -np.inf if mode == "max" else 0.0
    xp = np.full((n, c, h + 2 * p, w + 2 * p), fill)
    xp[:, :, p:p + h, p:p + w] = x
    valid = np.zeros(xp.shape[2:], bool)
    valid[p:p + h, p:p + w] = True
    if ignore_border:
        ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    else:
        ho, wo = -(-(h - k) // s) + 1, -(-(w - k) // s) + 1
    y = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            if mode == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            elif mode in ("average", "average_inc_pad"):
                y[:, :, i, j] = win.sum(axis=(2, 3)) / (k * k)
            elif mode == "sum":
                y[:, :, i, j] = win.sum(axis=(2, 3))
            else:
                y[:, :, i, j] = win.sum(axis=(2, 3)) / valid[i * s:i * s + k, j * s:j * s + k].sum()
    return y


def ref_lrn(x, axis, alpha=1e-4, k=2.0, beta=0.75, n=5):
    x = np.moveaxis(x.astype(np.float64), axis, 0)
    half, out = n // 2, np.empty_like(x)
    for i in range(x.shape[0]):
        lo, hi = max(0, i - half), min(x.shape[0], i + half + 1)
        out[i] = x[i] / (k + alpha * (x[lo:hi] ** 2).sum(axis=0)) ** beta
    return np.moveaxis(out, 0, axis)


def ref_softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------- forward passes
@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), (1, "half")])
def test_conv_matches_numpy_true_convolution_with_relu(stride, pad):
    x = pt.tensor4("x")
    W, b = Normal((4, 3, 3, 3), std=0.5), Constant((4,), val=0.1)
    conv = Conv(x, stride, pad, b=b, W=W, input_shape=(2, 3, 7, 7), printinfo=False)
    xv = rand(2, 3, 7, 7)
    p = 1 if pad == "half" else pad
    ref = np.maximum(ref_conv(xv, W.val.get_value(), stride, p) + 0.1, 0)
    out = fn([x], conv.output)(xv)
    assert out.shape == conv.output_shape == ref.shape
    assert out.dtype == floatX
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert conv.params == [W.val, b.val] and conv.weight_type == ["W", "b"]


@pytest.mark.parametrize("mode,k,s,p", [("max", 2, 2, 0), ("max", 3, 2, 1), ("average", 3, 1, 1),
                                        ("average_exc_pad", 3, 2, 1), ("sum", 2, 1, 0)])
def test_pool_matches_numpy(mode, k, s, p):
    x = pt.tensor4("x")
    pool = Pool(x, k, s, p, mode=mode, input_shape=(2, 3, 7, 7), printinfo=False)
    xv = rand(2, 3, 7, 7)
    out = fn([x], pool.output)(xv)
    ref = ref_pool(xv, k, s, p, mode)
    assert out.shape == pool.output_shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_pool_size_one_passes_input_through():
    x = pt.tensor4("x")
    pool = Pool(x, 1, 1, 0, input_shape=(2, 3, 5, 5), printinfo=False)
    assert pool.output is x and pool.output_shape == (2, 3, 5, 5)


def test_pool_keeps_partial_windows_without_ignore_border():
    x = pt.tensor4("x")
    out, shape = pool_bc01(x, (1, 2, 8, 8), 3, 2, 0, "max", ignore_border=False)
    xv = rand(1, 2, 8, 8)
    ref = ref_pool(xv, 3, 2, 0, "max", ignore_border=False)
    assert shape == ref.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(fn([x], out)(xv), ref)


def test_subtract_dimshuffle_flatten():
    x = pt.tensor4("x")
    mean = rand(3, 4, 5, 1).astype(np.float64)
    sub = Subtract(x, mean, input_shape=(3, 4, 5, 6), printinfo=False)
    shuffle = Dimshuffle(sub, (3, 0, 1, 2), printinfo=False)
    flat = Flatten(shuffle, 2, printinfo=False)
    xv = rand(3, 4, 5, 6)
    out = fn([x], [sub.output, shuffle.output, flat.output])(xv)
    np.testing.assert_allclose(out[0], xv - mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[1], (xv - mean).transpose(3, 0, 1, 2), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[2], (xv - mean).transpose(3, 0, 1, 2).reshape(6, -1), rtol=1e-6, atol=1e-6)
    assert [o.dtype for o in out] == [floatX] * 3
    assert (sub.output_shape, shuffle.output_shape, flat.output_shape) == ((3, 4, 5, 6), (6, 3, 4, 5), (6, 60))


def _crops_of(image, rows, cols):
    """Every crop of a (c, H, W) image, mirrored or not, with its (top, left, mirrored) key."""
    found = {}
    for top in range(image.shape[1] - rows + 1):
        for left in range(image.shape[2] - cols + 1):
            window = image[:, top:top + rows, left:left + cols]
            found[(top, left, False)] = window
            found[(top, left, True)] = window[:, :, ::-1]
    return found


@pytest.mark.parametrize("flag_batch", [True, False])
def test_crop_random_when_on_and_centre_when_off(flag_batch):
    x = pt.tensor4("x")
    crop = Crop(x, (2, 3, 3, 4), input_shape=(2, 6, 6, 4), flag_batch=flag_batch, printinfo=False)
    f = fn([x], crop.output)
    xv = rand(2, 6, 6, 4)
    seen = set()
    for _ in range(30):
        out = f(xv)
        assert out.shape == (2, 3, 3, 4)
        keys = []
        for b in range(4):
            matches = [key for key, w in _crops_of(xv[..., b], 3, 3).items() if np.array_equal(w, out[..., b])]
            assert matches, "output image is not a crop of its input image"
            keys.append(matches[0])
        if flag_batch:
            assert len(set(keys)) == 1, "flag_batch=True must crop every image of the batch alike"
        seen.update(keys)
    assert {k[2] for k in seen} == {False, True}, "mirroring never/always happened"
    assert len({k[:2] for k in seen}) >= 8, f"too few distinct offsets: {seen}"
    Crop.SetRandCropOff()
    np.testing.assert_array_equal(f(xv), xv[:, 1:4, 1:4, :])


def test_fc_and_softmax_with_costs_match_numpy():
    x, y = pt.matrix("x"), pt.lvector("y")
    fc = FC(x, 6, Normal((5, 6), std=0.5), Constant((6,), val=0.1), input_shape=(8, 5), printinfo=False)
    sm = Softmax(fc, 7, W=Normal((6, 7), std=1.0), b=Constant((7,), val=0.2), printinfo=False)
    f = fn([x, y], [fc.output, sm.output, sm.negative_log_likelihood(y), sm.errors(y), sm.errors_top_x(y),
                    sm.errors_top_x(y, num_top=2)])
    xv, yv = rand(8, 5), RNG.integers(0, 7, 8)
    h, p, nll, err, top5, top2 = f(xv, yv)
    h_ref = np.maximum(xv @ fc.W.val.get_value() + 0.1, 0)
    p_ref = ref_softmax(h_ref @ sm.W.val.get_value() + 0.2)
    np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p, p_ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(nll, -np.log(p_ref[np.arange(8), yv]).mean(), rtol=1e-4)
    assert np.isclose(err, (p_ref.argmax(1) != yv).mean())
    ranks = (-p_ref).argsort(axis=1)
    assert np.isclose(top5, np.mean([yv[i] not in ranks[i, :5] for i in range(8)]))
    assert np.isclose(top2, np.mean([yv[i] not in ranks[i, :2] for i in range(8)]))
    assert (fc.output_shape, sm.output_shape) == ((8, 6), (8, 7))


def test_softmax_rejects_bad_labels():
    sm = Softmax(pt.matrix("x"), 3, input_shape=(2, 4), printinfo=False)
    with pytest.raises(TypeError, match="vector of labels"):
        sm.errors(pt.lmatrix("y"))
    with pytest.raises(NotImplementedError, match="int labels"):
        sm.errors_top_x(pt.vector("y"))


@pytest.mark.parametrize("axis,shape", [(0, (7, 3, 3, 2)), (1, (2, 7, 3, 3))])
def test_lrn_matches_numpy(axis, shape):
    x = pt.tensor4("x")
    lrn = LRN(x, input_shape=shape, printinfo=False, axis=axis)
    xv = rand(*shape) * 30  # large enough that the normalisation matters
    np.testing.assert_allclose(fn([x], lrn.output)(xv), ref_lrn(xv, axis), rtol=1e-5)


def test_convpoollrn_c01b_groups_match_numpy():
    x = pt.tensor4("x")
    layer = ConvPoolLRN(x, convstride=2, padsize=1, poolsize=3, poolstride=2, group=2, b=0.1,
                        filter_shape=(4, 3, 3, 6), lrn=True, input_shape=(4, 11, 11, 2), printinfo=False)
    assert layer.weight_type == ["W", "b", "W", "b"] and len(layer.params) == 4
    xv = rand(4, 11, 11, 2) * 10
    bc01 = xv.transpose(3, 0, 1, 2)
    halves = []
    for g, W in enumerate((layer.W0, layer.W1)):
        w = W.val.get_value().transpose(3, 0, 1, 2)
        halves.append(np.maximum(ref_conv(bc01[:, 2 * g:2 * g + 2], w, 2, 1) + 0.1, 0))
    pooled = ref_pool(np.concatenate(halves, axis=1), 3, 2, 0, "max")
    ref = ref_lrn(pooled.transpose(1, 2, 3, 0), 0)
    out = fn([x], layer.output)(xv)
    assert out.shape == layer.output_shape == ref.shape == (6, 2, 2, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)


def test_convpoollrn_bc01_matches_numpy():
    x = pt.tensor4("x")
    W, b = Normal((5, 3, 3, 3), std=0.5), Constant((5,), val=0.2)
    layer = ConvPoolLRN_bc01(x, 1, 1, 3, 2, b=b, W=W, poolpad=1, lrn=True, input_shape=(2, 3, 6, 6),
                             printinfo=False)
    xv = rand(2, 3, 6, 6) * 10
    ref = ref_lrn(ref_pool(np.maximum(ref_conv(xv, W.val.get_value(), 1, 1) + 0.2, 0), 3, 2, 1, "max"), 1)
    out = fn([x], layer.output)(xv)
    assert out.shape == layer.output_shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------- gradients
def _grad_check(layer, x, xv, weights=()):
    """verify_grad of sum(output * random projection) w.r.t. the input and the given Weights."""
    shared = [w.val for w in weights]
    values = [xv] + [w.val.get_value() for w in weights]
    probes = [x] + [pt.tensor(dtype=floatX, shape=(None,) * s.ndim) for s in shared]
    projection = rand(*layer.output_shape)

    def cost(*args):
        out = graph_replace(layer.output, dict(zip(probes, args)) | dict(zip(shared, args[1:])), strict=False)
        return (out * projection).sum()

    verify_grad(cost, values, rng=np.random.default_rng(3), eps=1e-2, abs_tol=5e-2, rel_tol=5e-2)


def test_conv_gradients():
    x = pt.tensor4("x")
    W, b = Normal((3, 2, 3, 3), std=0.5), Constant((3,), val=2.0)  # positive bias: away from the ReLU kink
    conv = Conv(x, 2, 1, b=b, W=W, input_shape=(2, 2, 5, 5), printinfo=False)
    _grad_check(conv, x, rand(2, 2, 5, 5), [W, b])


@pytest.mark.parametrize("mode", ["max", "average_exc_pad"])
def test_pool_gradients(mode):
    x = pt.tensor4("x")
    pool = Pool(x, 3, 2, 1, mode=mode, input_shape=(2, 2, 5, 5), printinfo=False)
    xv = (RNG.permutation(100).reshape(2, 2, 5, 5) / 10).astype(floatX)  # distinct values: no ties
    _grad_check(pool, x, xv)


def test_lrn_gradients():
    x = pt.tensor4("x")
    lrn = LRN(x, input_shape=(6, 2, 2, 2), printinfo=False)
    _grad_check(lrn, x, rand(6, 2, 2, 2) * 20)


def test_fc_softmax_gradients():
    x = pt.matrix("x")
    fc = FC(x, 4, Normal((3, 4), std=0.5), Constant((4,), val=2.0), input_shape=(5, 3), printinfo=False)
    sm = Softmax(fc, 3, printinfo=False)
    _grad_check(fc, x, rand(5, 3), [fc.W, fc.b])
    _grad_check(sm, x, rand(5, 3), [sm.W, sm.b])


# --------------------------------------------------------------------------- dropout
def test_dropout_masks_when_on_and_scales_when_off():
    h = pt.matrix("h")
    drop = Dropout(h, n_out=500, prob_drop=0.3, input_shape=(40, 500), printinfo=False)
    f = fn([h], drop.output)
    hv = np.abs(rand(40, 500)) + 0.1
    first, second = f(hv), f(hv)
    for out in (first, second):
        kept = out != 0
        np.testing.assert_array_equal(out[kept], hv[kept])
        assert abs(kept.mean() - 0.7) < 0.02
    assert (first != second).any(), "the mask must change between calls"
    Dropout.SetDropoutOff()
    np.testing.assert_allclose(f(hv), 0.7 * hv, rtol=1e-6)
    Dropout.SetDropoutOn()
    assert (f(hv) == 0).any()


def test_random_layers_are_seeded_per_rank():
    h = pt.matrix("h")
    masks = []
    for rank in (0, 1):
        current_config.set_current(WorkerConfig(rank=rank, size=2, seed=5, device="cpu"))
        try:
            drop = Dropout(h, n_out=200, input_shape=(10, 200), printinfo=False)
        finally:
            current_config.set_current(None)
        masks.append(fn([h], drop.output)(np.ones((10, 200), floatX)))
    assert not np.array_equal(masks[0], masks[1])


# --------------------------------------------------------------------------- weights and helpers
def test_weights_follow_the_module_rng_and_save_load(tmp_path, monkeypatch):
    monkeypatch.setattr(layers2, "rng", np.random.RandomState(11))
    first = Normal((3, 4), std=0.1).val.get_value()
    monkeypatch.setattr(layers2, "rng", np.random.RandomState(11))
    again = Normal((3, 4), std=0.1)
    np.testing.assert_array_equal(again.val.get_value(), first)
    np.testing.assert_allclose(first, np.random.RandomState(11).normal(0, 0.1, (3, 4)).astype(floatX))
    for cls in (layers2.GlorotNormal, layers2.GlorotUniform, layers2.HeNormal, layers2.HeUniform):
        assert cls((4, 3, 2, 2)).val.dtype == floatX
    again.save_weight(str(tmp_path) + "/", "w")
    other = Constant((3, 4))
    other.load_weight(str(tmp_path) + "/", "w")
    np.testing.assert_array_equal(other.val.get_value(), first)
    with pytest.raises(ValueError, match="shape"):
        Constant((4, 3)).load_weight(str(tmp_path) + "/", "w")


def test_get_layers_params_count_and_weight_types(capsys):
    x = pt.tensor4("x")
    conv = Conv(x, 1, 0, b=Constant((4,)), W=Normal((4, 3, 3, 3)), input_shape=(2, 3, 6, 6), printinfo=False)
    pool = Pool(conv, 2, 2, 0, printinfo=False)
    flat = Flatten(pool, 2, printinfo=False)
    fc = FC(flat, 5, None, None, printinfo=False)
    drop = Dropout(fc, 5, printinfo=False)
    sm = Softmax(drop, 3, printinfo=True)
    assert "Softmax" in capsys.readouterr().out
    layers = get_layers(sm)
    assert layers == [conv, pool, flat, fc, drop, sm]
    params, types = get_params(layers)
    assert params == [conv.W.val, conv.b.val, fc.W.val, fc.b.val, sm.W.val, sm.b.val]
    assert types == ["W", "b"] * 3 == extract_weight_types(params)
    assert all(p.dtype == floatX for p in params)
    assert count_params(params, verbose=True) == 4 * 27 + 4 + 16 * 5 + 5 + 5 * 3 + 3
    assert "M floats" in capsys.readouterr().out


def test_user_layer_can_evaluate_its_output_shape():
    class Concat(layers2.Layer):  # like GoogLeNet's Incept/Aux_tower: sub-layers, shape evaluated
        def __init__(self, input):
            self.get_input_shape(input, None)
            dropped = Dropout(input, 4, printinfo=False)
            self.output = pt.concatenate([self.input, dropped.output], axis=1)
            self.output_shape = self.get_output_shape(self.input_shape)

    conv = Conv(pt.tensor4("x"), 1, 1, b=Constant((4,)), W=Normal((4, 3, 3, 3)), input_shape=(2, 3, 6, 6),
                printinfo=False)
    assert Concat(conv).output_shape == (2, 8, 6, 6)


@pytest.mark.parametrize("build,match", [
    (lambda x: Subtract(x, np.zeros((3, 5, 5, 1)), input_shape=(3, 4, 4, 2)), "subtract_arr must have shape"),
    (lambda x: Conv(x, 1, 0, b=Constant((4,)), W=Normal((4, 2, 3, 3)), input_shape=(1, 3, 5, 5)), "input channels"),
    (lambda x: Conv(x, 1, 0, b=Constant((4,)), W=Normal((4, 3, 3, 3)), input_shape=(1, 3, 5, 5),
                    output_shape=(1, 4, 5, 5)), "output_shape"),
    (lambda x: Pool(x, 2, 2, 0, mode="median", input_shape=(1, 3, 4, 4)), "mode='median'"),
    (lambda x: Crop(x, (3, 8, 8, 2), input_shape=(3, 6, 6, 2)), "does not fit"),
    (lambda x: Dimshuffle(x, (0, 1, 2), input_shape=(1, 3, 4, 4)), "new_axis_order"),
    (lambda x: Dropout(x, 4, input_shape=(1, 3, 4, 4), prob_drop=1.0), "prob_drop"),
    (lambda x: Conv(x, 1, 0, b=Constant((4,)), W=Normal((4, 3, 3, 3))), "input_shape"),
    (lambda x: FC(Flatten(x, 2, input_shape=(1, 3, 4, 4)), 5, Normal((48, 5)), None), "both W and b"),
    (lambda x: FC(Flatten(x, 2, input_shape=(1, 3, 4, 4)), 5, Normal((40, 5)), Constant((5,))), "W of shape"),
    (lambda x: ConvPoolLRN(x, 1, 0, 1, 1, group=2, b=0.0, filter_shape=(3, 3, 3, 4), input_shape=(3, 6, 6, 2)),
     "cannot be split"),
])
def test_bad_inputs_raise_clear_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build(pt.tensor4("x"))


def test_batchnormal_is_not_available():
    with pytest.raises(NotImplementedError, match="BatchNormLayer"):
        BatchNormal()


# --------------------------------------------------------------------------- end to end, cifar10.py's idiom
@pytest.mark.slow
def test_cifar10_style_cnn_trains_with_givens_and_subbatches():
    """Subtract -> Crop -> Dimshuffle -> Conv -> Pool -> Flatten -> FC -> Dropout -> Softmax on a c01b file
    batch held in ``shared_x``, sub-batches picked by ``subb_ind`` through ``givens``; plain SGD."""
    gen = np.random.default_rng(0)
    n_file, batch, side, crop = 64, 32, 12, 10
    images = gen.uniform(0, 1, (2 * n_file, 3, side, side))
    labels = gen.integers(0, 2, 2 * n_file)
    images[labels == 1, 0] += 1.0           # class 1: redder
    images[labels == 0, 2] += 1.0           # class 0: bluer
    mean = images.mean(axis=0)[:, :, :, np.newaxis]

    shared_x = pytensor.shared(np.zeros((3, side, side, n_file), dtype=floatX), borrow=True)
    shared_y = pytensor.shared(np.zeros((n_file,), dtype=int), borrow=True)
    subb_ind = pt.iscalar("subb")
    x_slice = shared_x[:, :, :, subb_ind * batch:(subb_ind + 1) * batch]
    y_slice = shared_y[subb_ind * batch:(subb_ind + 1) * batch]

    x, y, lr = pt.ftensor4("x"), pt.lvector("y"), pt.scalar("lr")
    net = Subtract(input=x, input_shape=(3, side, side, batch), subtract_arr=mean, printinfo=False)
    net = Crop(input=net, output_shape=(3, crop, crop, batch), flag_batch=True, printinfo=False)
    net = Dimshuffle(input=net, new_axis_order=(3, 0, 1, 2), printinfo=False)
    net = Conv(input=net, input_shape=(batch, 3, crop, crop), convstride=1, padsize=0,
               W=Normal((8, 3, 3, 3), std=0.1), b=Constant((8,), val=0), printinfo=False)
    net = Pool(input=net, poolsize=2, poolstride=2, poolpad=0, mode="max", printinfo=False)
    net = Flatten(input=net, axis=2, printinfo=False)
    net = FC(input=net, n_out=32, W=Normal((net.output_shape[1], 32), std=0.05), b=Constant((32,), val=0.1),
             printinfo=False)
    net = Dropout(input=net, n_out=net.output_shape[1], prob_drop=0.5, printinfo=False)
    softmax = Softmax(input=net, n_out=2, W=Normal((net.output_shape[1], 2), std=0.05), b=Constant((2,), val=0),
                      printinfo=False)
    cost, error = softmax.negative_log_likelihood(y), softmax.errors(y)
    params, _ = get_params(get_layers(softmax))
    updates = [(p, p - lr * g) for p, g in zip(params, pytensor.grad(cost, params))]
    train = pytensor.function([subb_ind, lr], [cost, error], updates=updates,
                              givens=[(x, x_slice), (y, y_slice)])
    val = pytensor.function([subb_ind], [cost, error], givens=[(x, x_slice), (y, y_slice)])

    def val_cost():
        Dropout.SetDropoutOff(); Crop.SetRandCropOff()          # noqa: E702 (as cifar10.py's val_iter)
        shared_x.set_value(np.rollaxis(images[n_file:], 0, 4).astype(floatX))
        shared_y.set_value(labels[n_file:])
        result = np.mean([val(i)[0] for i in range(n_file // batch)])
        Dropout.SetDropoutOn(); Crop.SetRandCropOn()            # noqa: E702
        return result

    before = val_cost()
    losses = []
    for _epoch in range(8):
        shared_x.set_value(np.rollaxis(images[:n_file], 0, 4).astype(floatX))
        shared_y.set_value(labels[:n_file])
        for sub in range(n_file // batch):
            losses.append(float(train(sub, np.float32(0.3))[0]))
    after = val_cost()
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:4]), losses
    assert after < 0.8 * before, (before, after)
