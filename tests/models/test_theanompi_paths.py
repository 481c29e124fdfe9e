"""Theano-MPI's models at Theano-MPI's paths, in one process: the names and constructor, Theano-MPI's data formats,
sub-batches and crops, GoogLeNet's auxiliary classifiers, the GAN losses.
(Sessions: tests/sessions/test_theanompi_zoo.py.)
"""

import importlib
import importlib.util
import inspect
import sys

import numpy as np
import pytest
from conftest import ASSETS

from theanompi.core.errors import ConfigError
from theanompi.models.contract import WorkerConfig, check_model_class

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh

#: Theano-MPI's MODELFILE -> MODELCLASS
PATHS = {
    "theanompi.models.cifar10": "Cifar10_model",
    "theanompi.models.alex_net": "AlexNet",
    "theanompi.models.googlenet": "GoogLeNet",
    "theanompi.models.lasagne_model_zoo.vgg16": "VGG16",
    "theanompi.models.lasagne_model_zoo.resnet50": "ResNet50",
    "theanompi.models.lasagne_model_zoo.wgan": "WGAN",
    "theanompi.models.lasagne_model_zoo.lsgan": "LSGAN",
    "theanompi.models.lasagne_model_zoo.lsgan_cifar10": "LSGAN",
    "theanompi.models.keras_model_zoo.wresnet": "Wide_ResNet",
}


@pytest.mark.parametrize("modelfile", list(PATHS))
def test_each_path_has_its_class_with_theanompis_constructor(modelfile):
    if "keras" in modelfile and importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed (the [test] extra installs it)")
    cls = getattr(importlib.import_module(modelfile), PATHS[modelfile])
    check_model_class(cls)
    assert list(inspect.signature(cls).parameters) == ["config"]  # ModelClass(config)
    assert callable(cls.validate_options) and cls.__doc__ and sys.modules[modelfile].__doc__


def test_theanompi_models_exports_three_classes_lazily():
    import theanompi.models
    from theanompi.models.alex_net import AlexNet
    from theanompi.models.cifar10 import Cifar10_model
    from theanompi.models.googlenet import GoogLeNet

    assert theanompi.models.Cifar10_model is Cifar10_model and theanompi.models.AlexNet is AlexNet
    assert theanompi.models.GoogLeNet is GoogLeNet and {"AlexNet", "GoogLeNet"} <= set(dir(theanompi.models))
    with pytest.raises(AttributeError, match="has no attribute 'VGG16'"):
        theanompi.models.VGG16  # noqa: B018 - the attribute access is the test


def test_theanompi_defaults():
    from theanompi.models.alex_net import AlexNet
    from theanompi.models.cifar10 import Cifar10_model
    from theanompi.models.lasagne_model_zoo.resnet50 import ResNet50
    from theanompi.models.lasagne_model_zoo.vgg16 import VGG16

    assert {k: AlexNet.defaults[k] for k in ("lrn", "groups", "layout", "input_size", "batch_size")} == {
        "lrn": True, "groups": 2, "layout": "chwb", "input_size": 227, "batch_size": 128}
    assert (VGG16.defaults["depth"], VGG16.defaults["batch_size"], ResNet50.defaults["depth"]) == (16, 64, 50)
    assert (Cifar10_model.defaults["input_size"], Cifar10_model.defaults["batch_size"]) == (28, 256)


def test_imagenet_models_read_theanompis_batches_in_sub_batches(tmp_path):
    """train_hkl_b16/ of bare uint8 (C, H, W, B) arrays, labels/*.npy, misc/img_mean.npy; MODEL_BATCH_SIZE=8 splits
    each file of 16 images into two steps (Theano-MPI's file_batch_size // batch_size)."""
    from theanompi.models.alex_net import AlexNet
    from theanompi.models.data.image_loaders import SubBatchData

    root = zh.write_theanompi_imagenet(tmp_path / "imagenet", n_train_files=4, n_val_files=2, batch=16)
    options = dict(data_dir=str(root), input_size=32, n_classes=4, widths="8,8,8,8,8", fc_width=16, batch_size=8,
                   prefetch=False)
    model = AlexNet(WorkerConfig(rank=1, size=2, seed=0, device="cpu1", model_options=options))
    assert isinstance(model.data, SubBatchData) and model.data.n_subb == 2
    assert model.data.n_batch_train == 2 * 2 and model.data.n_batch_val == 1 * 2  # 2 of the 4 files x 2 steps
    x, y = model.data.train_batch(1)
    assert x.shape == (8, 3, 32, 32) and x.dtype == np.float32 and y.shape == (8,) and set(y) <= set(range(4))
    with pytest.raises(ConfigError, match="MODEL_BATCH_SIZE=6 does not divide the 16 images of each file"):
        AlexNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={**options, "batch_size": 6}))
    with pytest.raises(ConfigError, match="has no 'train' directory of hickle batch files"):
        AlexNet.validate_options({"data_dir": str(root / "labels")})


def test_cifar10_model_trains_on_28x28_crops_and_validates_on_the_centre(tmp_path):
    from theanompi.models.cifar10 import Cifar10_model
    from theanompi.models.data.cifar10 import Cifar10Data

    root = zh.write_cifar10(tmp_path / "cifar", n_per_file=16, n_test=8)
    model = Cifar10_model(WorkerConfig(rank=0, size=1, seed=0, device="cpu0",
                                       model_options={"data_dir": str(root), "batch_size": 8}))
    assert model.data.input_shape == (3, 28, 28) and model.n_params == 351_946  # Theano-MPI's widths
    model.data.set_epoch(0)
    assert model.data.train_batch(0)[0].shape == (8, 3, 28, 28)
    centre = model.data.val_batch(0)[0]
    full = Cifar10Data(str(root), 8, 0, 1, 0).val_batch(0)[0]
    np.testing.assert_array_equal(centre, full[:, :, 2:30, 2:30])
    with pytest.raises(ConfigError, match="MODEL_INPUT_SIZE=36 is not allowed"):
        Cifar10_model.validate_options({"data_dir": str(root), "input_size": 36})


@pytest.mark.slow
def test_googlenet_trains_on_its_main_loss_plus_03_of_each_auxiliary_loss():
    """Width 1/16, 32x32 inputs: the compiled training loss equals main + 0.3 x (aux 1 + aux 2) computed apart."""
    import pytensor

    from theanompi.models.base import ClassifierModel
    from theanompi.models.googlenet import GoogLeNet

    opts = dict(data="synthetic", input_size=32, n_classes=4, width=0.0625, train_size=16, val_size=8, batch_size=8,
                prefetch=False, dropout=0.0)
    model = GoogLeNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
    assert len(model.aux_logits) == 2
    total, _ = model.loss_and_error()
    # each classifier's own cross-entropy, in the same graph (the same dropout draws)
    parts = [ClassifierModel.loss_and_error(model, logits)[0] for logits in (model.logits, *model.aux_logits)]
    f = pytensor.function([model.x, model.y], [total, *parts])
    model.data.set_epoch(0)
    x, y = model.data.train_batch(0)
    total_v, main_v, aux1_v, aux2_v = f(x, y)
    np.testing.assert_allclose(total_v, main_v + 0.3 * (aux1_v + aux2_v), rtol=1e-5)
    assert aux1_v > 0 and aux2_v > 0


def test_gan_losses_wasserstein_and_least_squares():
    """The same networks and batch: WGAN's critic loss is -(mean f(x) - mean f(G(z))) on clipped weights, LSGAN's is
    ((f(x) - 1)^2 + f(G(z))^2) / 2 on the weights as they are (computed apart with numpy)."""
    import pytensor

    from theanompi.models.zoo.gans import LSGAN, WGAN

    opts = dict(critic_hidden="8", gen_hidden="8", train_size=64, clip=0.05)
    for cls in (WGAN, LSGAN):
        gan = cls(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
        x, z, fake, reported, critic_loss, gen_loss, _ = gan._graph()
        f = pytensor.function([x, z], [fake, reported, critic_loss, gen_loss])
        xb = gan.data.x_train[:16]
        zb = gan.noise(16, 0, 0)
        fake_v, reported_v, critic_v, gen_v = f(xb, zb)
        critic = pytensor.function([gan.critic_in.input_var], gan_critic_output(gan))
        real_out, fake_out = critic(xb).ravel(), critic(fake_v).ravel()
        if cls is WGAN:
            np.testing.assert_allclose(critic_v, -(real_out.mean() - fake_out.mean()), rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(reported_v, -critic_v)
        else:
            np.testing.assert_allclose(critic_v, 0.5 * (((real_out - 1) ** 2).mean() + (fake_out ** 2).mean()),
                                       rtol=1e-5)
            np.testing.assert_allclose(gen_v, 0.5 * ((fake_out - 1) ** 2).mean(), rtol=1e-5)
            assert reported_v == critic_v


def gan_critic_output(gan):
    """The critic's output on its input layer, through clip(w) for WGAN (as its training graph reads it)."""
    import pytensor.tensor as pt
    from pytensor.graph.replace import clone_replace

    import theanompi.nn as L

    out = L.get_output(gan.critic)
    if not gan.wasserstein:
        return out
    c = np.asarray(gan.hp["clip"], dtype=gan.floatX)
    return clone_replace(out, replace={p: pt.clip(p, -c, c) for p in gan.critic_params})


def test_gans_on_mnist_need_their_directory(tmp_path):
    from theanompi.models.lasagne_model_zoo.wgan import WGAN

    with pytest.raises(ConfigError, match="data=mnist needs MODEL_DATA_DIR"):
        WGAN.validate_options({})
    root = zh.write_mnist(tmp_path / "mnist", n_train=64, n_val=16)
    gan = WGAN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0",
                            model_options={"data_dir": str(root), "widths": "4,8", "fc_width": 8, "z_dim": 4}))
    assert gan.image_shape == (1, 28, 28) and gan.sample(2).shape == (2, 1, 28, 28)
