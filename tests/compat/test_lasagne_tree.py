"""theanompi.lasagne: Lasagne's module tree over our layer library, and the ``import lasagne`` alias.

The networks are written as Lasagne users write them (Lasagne-zoo style: vgg16.py, wgan.py), through
``theanompi.lasagne``; the alias itself is tested in a fresh interpreter (it changes ``sys.meta_path``).
"""

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L
from theanompi import lasagne

ROOT = Path(__file__).resolve().parents[2]
floatX = pytensor.config.floatX


def build_small_vgg(input_shape, n_classes):
    """vgg16.py's build function, scaled down (and with an LRN layer, as vgg_cnn_s has)."""
    from theanompi.lasagne.layers import Conv2DLayer as ConvLayer
    from theanompi.lasagne.layers import DenseLayer, DropoutLayer, InputLayer, NonlinearityLayer
    from theanompi.lasagne.layers import LocalResponseNormalization2DLayer as LRNLayer
    from theanompi.lasagne.layers import MaxPool2DLayer as PoolLayer
    from theanompi.lasagne.nonlinearities import softmax

    net = {}
    net["input"] = InputLayer(input_shape)
    net["conv1_1"] = ConvLayer(net["input"], 8, 3, pad=1, flip_filters=False)
    net["norm1"] = LRNLayer(net["conv1_1"], alpha=0.0001)
    net["pool1"] = PoolLayer(net["norm1"], 2)
    net["conv2_1"] = ConvLayer(net["pool1"], 16, 3, pad=1, flip_filters=False)
    net["pool2"] = PoolLayer(net["conv2_1"], 2)
    net["fc6"] = DenseLayer(net["pool2"], num_units=32)
    net["fc6_dropout"] = DropoutLayer(net["fc6"], p=0.5)
    net["fc8"] = DenseLayer(net["fc6_dropout"], num_units=n_classes, nonlinearity=None)
    net["prob"] = NonlinearityLayer(net["fc8"], softmax)
    return net


@pytest.mark.slow
def test_vgg_style_network_trains_with_nesterov_momentum():
    lasagne.random.set_rng(np.random.RandomState(1234))
    net = build_small_vgg((None, 3, 8, 8), 4)
    rng = np.random.default_rng(0)
    y_data = rng.integers(0, 4, size=32).astype("int32")
    x_data = lasagne.utils.floatX(rng.standard_normal((32, 3, 8, 8)) * 0.5 + y_data[:, None, None, None] - 1.5)

    x, y = pt.tensor4("x"), pt.ivector("y")
    output = lasagne.layers.get_output(net["prob"], x, deterministic=False)
    cost = lasagne.objectives.categorical_crossentropy(output, y).mean()
    cost = cost + 1e-4 * lasagne.regularization.regularize_network_params(net["prob"], lasagne.regularization.l2)
    params = lasagne.layers.get_all_params(net["prob"], trainable=True)
    updates = lasagne.updates.nesterov_momentum(cost, params, learning_rate=0.05, momentum=0.9)
    train = pytensor.function([x, y], cost, updates=updates)
    val_out = lasagne.layers.get_output(net["prob"], x, deterministic=True)
    val_loss = lasagne.objectives.categorical_crossentropy(val_out, y).mean()
    top1 = lasagne.objectives.categorical_accuracy(val_out, y).mean()
    top2 = lasagne.objectives.categorical_accuracy(val_out, y, top_k=2).mean()
    validate = pytensor.function([x, y], [val_loss, top1, top2])

    before, acc_before, _ = validate(x_data, y_data)
    for _ in range(25):
        train(x_data, y_data)
    after, acc_after, top2_after = validate(x_data, y_data)
    assert after < 0.5 * before, (before, after)
    assert acc_after > acc_before and acc_after >= 0.75 and top2_after >= acc_after
    assert [p.name for p in params] == ["W", "b", "W", "b", "W", "b", "W", "b"]

    # get/set_all_param_values round trip, and the same RandomState seed builds the same network.
    values = lasagne.layers.get_all_param_values(net["prob"])
    lasagne.random.set_rng(np.random.RandomState(1234))
    fresh = build_small_vgg((None, 3, 8, 8), 4)
    first = lasagne.layers.get_all_param_values(fresh["prob"])
    lasagne.random.set_rng(np.random.RandomState(1234))
    assert all(np.array_equal(a, b) for a, b in zip(first, lasagne.layers.get_all_param_values(
        build_small_vgg((None, 3, 8, 8), 4)["prob"])))
    lasagne.layers.set_all_param_values(fresh["prob"], values)
    assert all(np.array_equal(a, b) for a, b in zip(values, lasagne.layers.get_all_param_values(fresh["prob"])))


def build_generator(input_var=None):
    """wgan.py's generator, with fewer units."""
    from theanompi.lasagne.layers import DenseLayer, InputLayer, ReshapeLayer
    from theanompi.lasagne.layers import TransposedConv2DLayer as Deconv2DLayer
    try:
        from theanompi.lasagne.layers.dnn import batch_norm_dnn as batch_norm
    except ImportError:
        from theanompi.lasagne.layers import batch_norm
    from theanompi.lasagne.nonlinearities import sigmoid

    layer = InputLayer(shape=(None, 16), input_var=input_var)
    layer = batch_norm(DenseLayer(layer, 32))
    layer = batch_norm(DenseLayer(layer, 8 * 7 * 7))
    layer = ReshapeLayer(layer, ([0], 8, 7, 7))
    layer = batch_norm(Deconv2DLayer(layer, 4, 5, stride=2, crop="same", output_size=14))
    return Deconv2DLayer(layer, 1, 5, stride=2, crop="same", output_size=28, nonlinearity=sigmoid)


def build_critic(input_var=None):
    """wgan.py's critic, with fewer units."""
    from theanompi.lasagne.layers import Conv2DLayer, DenseLayer, InputLayer
    try:
        from theanompi.lasagne.layers.dnn import batch_norm_dnn as batch_norm
    except ImportError:
        from theanompi.lasagne.layers import batch_norm
    from theanompi.lasagne.nonlinearities import LeakyRectify

    lrelu = LeakyRectify(0.2)
    layer = InputLayer(shape=(None, 1, 28, 28), input_var=input_var)
    layer = batch_norm(Conv2DLayer(layer, 4, 5, stride=2, pad="same", nonlinearity=lrelu))
    layer = batch_norm(Conv2DLayer(layer, 8, 5, stride=2, pad="same", nonlinearity=lrelu))
    layer = batch_norm(DenseLayer(layer, 32, nonlinearity=lrelu))
    return DenseLayer(layer, 1, nonlinearity=None, b=None)


@pytest.mark.slow
def test_wgan_style_generator_and_critic():
    lasagne.random.set_rng(np.random.RandomState(1234))
    noise_var, input_var = pt.matrix("noise"), pt.tensor4("inputs")
    generator, critic = build_generator(noise_var), build_critic(input_var)
    assert generator.output_shape == (None, 1, 28, 28)
    assert critic.output_shape == (None, 1)
    shapes = [layer.output_shape for layer in lasagne.layers.get_all_layers(generator)]
    assert (None, 4, 14, 14) in shapes and (None, 8, 7, 7) in shapes

    # What Lasagne returns: weights and batch-norm scales; no biases, shifts or running statistics.
    clipped = lasagne.layers.get_all_params(critic, trainable=True, regularizable=True)
    assert [p.name for p in clipped] == ["W", "gamma", "W", "gamma", "W", "gamma", "W"]
    trainable = lasagne.layers.get_all_params(critic, trainable=True)
    assert [p.name for p in trainable] == ["W", "beta", "gamma", "W", "beta", "gamma", "W", "beta", "gamma", "W"]
    assert [p.name for p in lasagne.layers.get_all_params(generator, trainable=True)][-3:] == ["gamma", "W", "b"]

    real_out = lasagne.layers.get_output(critic)
    fake_out = lasagne.layers.get_output(critic, lasagne.layers.get_output(generator))
    loss_critic = real_out.mean() - fake_out.mean()
    updates = lasagne.updates.sgd(-loss_critic, trainable, learning_rate=0.01)
    updates.update((p, pt.clip(updates.get(p, p), -0.01, 0.01)) for p in clipped)
    samples_out = lasagne.layers.get_output(generator, deterministic=True)
    critic_step = pytensor.function([input_var, noise_var], [real_out, fake_out, samples_out], updates=updates)
    rng = np.random.default_rng(1)
    images = lasagne.utils.floatX(rng.random((3, 1, 28, 28)))
    noise = lasagne.utils.floatX(rng.random((3, 16)))
    real, fake, samples = critic_step(images, noise)
    assert real.shape == fake.shape == (3, 1)
    assert all(np.abs(p.get_value()).max() <= 0.01 + 1e-7 for p in clipped)
    assert samples.shape == (3, 1, 28, 28) and samples.min() >= 0 and samples.max() <= 1


def test_tree_reexports_the_one_implementation():
    assert lasagne.layers.DenseLayer is L.DenseLayer and lasagne.layers.get_output is L.get_output
    assert lasagne.layers.Deconv2DLayer is L.TransposedConv2DLayer is lasagne.layers.conv.TransposedConv2DLayer
    assert lasagne.layers.helper.get_all_params is L.get_all_params and lasagne.layers.batch_norm is L.batch_norm
    assert lasagne.init.GlorotUniform is L.init.GlorotUniform and lasagne.updates.adam is L.updates.adam
    assert lasagne.random.set_rng is L.init.set_rng and lasagne.utils.floatX is L.utils.floatX
    assert lasagne.nonlinearities.ScaledTanh is L.nonlinearities.ScaledTanH
    assert not hasattr(lasagne.layers, "init") and "updates" not in lasagne.layers.__all__
    for name in lasagne.layers.__all__:
        assert getattr(lasagne.layers, name) is getattr(L, name)
    with pytest.raises(AttributeError, match="module 'lasagne.layers' has no attribute 'NoSuchLayer'"):
        _ = lasagne.layers.NoSuchLayer
    with pytest.raises(ImportError, match=r"lasagne.layers.dnn \(cuDNN layers\) is not part of theanompi.lasagne"):
        importlib.import_module("theanompi.lasagne.layers.dnn")
    with pytest.raises(ValueError, match="set_rng: expected a numpy RandomState, Generator, numpy.random or an int "
                                         "seed, got 'x'"):
        lasagne.random.set_rng("x")


def test_tree_has_lasagnes_modules_and_names_what_is_not_ported():
    assert lasagne.layers.local.LocallyConnected2DLayer is L.LocallyConnected2DLayer
    assert lasagne.layers.embedding.EmbeddingLayer is L.EmbeddingLayer
    assert lasagne.layers.special.TPSTransformerLayer is L.TPSTransformerLayer
    assert lasagne.layers.recurrent.GRULayer is L.GRULayer and lasagne.utils.int_types is L.utils.int_types
    with pytest.raises(AttributeError, match="lasagne.layers.pool.pool_3d exists in Lasagne but is not ported"):
        _ = lasagne.layers.pool.pool_3d


#: Every module of Lasagne's tree that theanompi.lasagne held as a file before it became a name map.
LASAGNE_MODULES = [
    "init", "layers", "layers.base", "layers.conv", "layers.dense", "layers.embedding", "layers.helper", "layers.input",
    "layers.local", "layers.merge", "layers.noise", "layers.normalization", "layers.pool", "layers.recurrent",
    "layers.shape", "layers.special", "nonlinearities", "objectives", "random", "regularization",
    "theano_extensions", "theano_extensions.conv", "theano_extensions.padding", "updates", "utils",
]


@pytest.mark.parametrize("name", LASAGNE_MODULES)
def test_every_module_of_the_tree_imports_and_is_an_attribute_of_its_parent(name):
    module = importlib.import_module(f"theanompi.lasagne.{name}")
    parent, _, child = f"theanompi.lasagne.{name}".rpartition(".")
    assert getattr(sys.modules[parent], child) is module is sys.modules[f"theanompi.lasagne.{name}"]


@pytest.mark.parametrize("name", sorted(lasagne.MODULES))
def test_a_lasagne_module_holds_its_nn_modules_names_and_lasagnes_own(name):
    module, implementation = importlib.import_module(f"theanompi.lasagne.{name}"), lasagne.MODULES[name]
    extra = lasagne.LASAGNE_ONLY_NAMES.get(name, {})
    assert module.__all__ == [*implementation.__all__, *extra]
    assert all(getattr(module, attr) is getattr(implementation, attr) for attr in implementation.__all__)
    assert all(getattr(module, attr) is value for attr, value in extra.items())
    assert f":mod:`{implementation.__name__}`" in module.__doc__
    with pytest.raises(AttributeError, match=f"module 'lasagne.{name}' has no attribute 'not_a_lasagne_name'"):
        _ = module.not_a_lasagne_name


def numpy_conv1d(x, W, stride, pad):
    """A true convolution (np.convolve flips the filter) summed over the input channels."""
    x = np.pad(x, [(0, 0), (0, 0), (pad, pad)])
    return np.array([[sum(np.convolve(x[b, c], W[f, c], mode="valid") for c in range(x.shape[1]))[::stride]
                      for f in range(W.shape[0])] for b in range(x.shape[0])])


@pytest.mark.parametrize("name", ["conv1d_sc", "conv1d_mc0", "conv1d_mc1", "conv1d_unstrided", "conv1d_sd",
                                  "conv1d_md"])
def test_theano_extensions_conv1d_functions_match_numpy(name):
    conv = getattr(lasagne.theano_extensions.conv, name)
    rng = np.random.default_rng(0)
    x, W = rng.normal(size=(2, 3, 11)), rng.normal(size=(4, 3, 4))
    xv, Wv = pt.dtensor3("x"), pt.dtensor3("W")
    out = conv(xv, Wv, x.shape, W.shape, subsample=(2,))
    np.testing.assert_allclose(out.eval({xv: x, Wv: W}), numpy_conv1d(x, W, 2, 0), atol=1e-10)
    unflipped = conv(xv, Wv, x.shape, W.shape, filter_flip=False).eval({xv: x, Wv: W})
    np.testing.assert_allclose(unflipped, numpy_conv1d(x, W[:, :, ::-1], 1, 0), atol=1e-10)
    with pytest.raises((ValueError, RuntimeError), match="border_mode"):
        conv(xv, Wv, x.shape, W.shape, border_mode=None)
    if name in ("conv1d_mc0", "conv1d_mc1"):
        padded = conv(xv, Wv, x.shape, W.shape, border_mode=(2,)).eval({xv: x, Wv: W})
        np.testing.assert_allclose(padded, numpy_conv1d(x, W, 1, 2), atol=1e-10)
    if name in ("conv1d_unstrided", "conv1d_sd", "conv1d_md"):
        with pytest.raises(RuntimeError, match=r"the filter length \(4\) is not a multiple of the stride \(3\)"):
            conv(xv, Wv, x.shape, W.shape, subsample=(3,))


def test_theano_extensions_pad_matches_numpy():
    x = np.arange(24.0).reshape(2, 3, 4)
    got = lasagne.theano_extensions.padding.pad(pt.as_tensor_variable(x), [(1, 2), 3], val=7, batch_ndim=1).eval()
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (1, 2), (3, 3)], constant_values=7))


def run_python(code: str, tmp_path: Path, extra_path: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (extra_path, str(ROOT)) if p))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)


@pytest.mark.slow
def test_alias_import_lasagne_gives_theanompi_lasagne(tmp_path):
    proc = run_python("""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
        logging.getLogger("pytensor").setLevel(logging.WARNING)
        from theanompi import lasagne_alias as alias
        alias.install(); alias.install()
        finders = [f for f in sys.meta_path if isinstance(f, alias.LasagneAliasFinder)]
        assert len(finders) == 1 and sys.meta_path[-1] is finders[0], sys.meta_path
        import lasagne
        from lasagne.layers import DenseLayer
        import lasagne.layers.helper
        import lasagne.layers.pool
        import theanompi.lasagne, theanompi.nn as L
        assert lasagne.layers.pool is theanompi.lasagne.layers.pool and lasagne.layers.pool.Pool2DLayer is L.Pool2DLayer
        assert lasagne is theanompi.lasagne and lasagne.layers is theanompi.lasagne.layers
        assert sys.modules["lasagne.layers.helper"] is theanompi.lasagne.layers.helper
        assert DenseLayer is L.DenseLayer and lasagne.layers.get_output is L.get_output
        assert lasagne.__spec__.name == "theanompi.lasagne"
        net = lasagne.layers.DenseLayer(lasagne.layers.InputLayer((None, 3)), 2)
        assert [p.name for p in lasagne.layers.get_all_params(net, regularizable=True)] == ["W"]
        try:
            from lasagne.layers.dnn import batch_norm_dnn
        except ImportError as exc:
            print("dnn ImportError:", type(exc).__name__)
        else:
            raise AssertionError("lasagne.layers.dnn imported")
        try:
            from lasagne.layers import dnn
        except ImportError as exc:
            print("from lasagne.layers import dnn:", type(exc).__name__, exc)
        else:
            raise AssertionError("lasagne.layers.dnn imported")
        try:
            import lasagne.no_such_module
        except ModuleNotFoundError:
            print("missing submodule: ModuleNotFoundError")
        import lasagne as again
        print("done", again is lasagne)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("INFO lasagne is not installed: `import lasagne` gives theanompi.lasagne") == 1
    assert "dnn ImportError: ImportError" in proc.stdout
    assert "from lasagne.layers import dnn: ImportError lasagne.layers.dnn (cuDNN layers) is not part" in proc.stdout
    assert "missing submodule: ModuleNotFoundError" in proc.stdout and "done True" in proc.stdout


def test_alias_gives_way_to_a_real_lasagne(tmp_path):
    real = tmp_path / "site" / "lasagne"
    (real / "layers").mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    (real / "layers" / "__init__.py").write_text("REAL_LAYERS = True\n")
    proc = run_python("""
        from theanompi import lasagne_alias as alias
        alias.install()
        import lasagne, lasagne.layers
        assert lasagne.REAL and lasagne.layers.REAL_LAYERS
        try:
            import lasagne.updates
        except ModuleNotFoundError:
            print("real lasagne kept")
    """, tmp_path, extra_path=str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "real lasagne kept" in proc.stdout and "theanompi.lasagne" not in proc.stdout + proc.stderr
