"""AlexNet and VGG on small ImageNet-style hickle batch directories written by the test."""

import sys

import numpy as np
import pytest
from conftest import ASSETS

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.models.data.hickle_batches import HickleBatchData
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.zoo.alexnet import AlexNet
from theanompi.models.zoo.vgg import VGG

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh

# 3x36x36 images cropped to 32x32, 4 classes, narrow layers
ALEXNET = dict(input_size=32, n_classes=4, widths="8,16,16,16,16", fc_width=32, lr=0.02)
VGG11 = dict(input_size=32, n_classes=4, widths="8,8,16,16,16", fc_width=32, depth=11, lr=0.02)


@pytest.fixture(scope="module")
def hickle_dir(tmp_path_factory):
    """train/ 16 files x 16 images (dicts with labels), val/ 4 files, img_mean.npy."""
    return zh.write_hickle_dataset(tmp_path_factory.mktemp("imagenet_hkl"), n_train_files=16, n_val_files=4,
                                   batch=16, n_classes=4)


@pytest.mark.slow
@pytest.mark.parametrize("cls, options", [(AlexNet, ALEXNET), (VGG, VGG11)], ids=["AlexNet", "VGG11"])
def test_learns_hickle_batches_with_dropout_off_in_validation(hickle_dir, cls, options):
    """Measured: 100 % validation accuracy (64 images) after 8 epochs of 16 steps, for both."""
    model = zh.make_model(cls, data_dir=str(hickle_dir), **options)
    assert isinstance(model.data, PrefetchData) and isinstance(model.data.data, HickleBatchData)
    assert model.data.batch_size == 16 and model.data.input_shape == (3, 32, 32)
    assert model.data.n_batch_train == 16 and model.data.n_batch_val == 4
    dropouts = [lyr for lyr in L.get_all_layers(model.network) if isinstance(lyr, L.DropoutLayer)]
    assert len(dropouts) == 2 and all(lyr.p == 0.5 for lyr in dropouts)
    assert not L.get_state_updates(model.val_logits)  # no dropout generator in the validation graph
    assert len(L.get_state_updates(model.logits)) == 2
    _, err0 = zh.validate(model)
    assert zh.validate(model)[1] == err0  # deterministic validation
    losses = zh.train_epochs(model, 8)
    assert np.mean(losses[-16:]) < 0.5 * np.mean(losses[:16]), losses
    _, err = zh.validate(model)
    assert err <= 0.1, (err0, err)
    model.cleanup()
    assert model.data.closed


@pytest.mark.slow
def test_chwb_layout_labels_files_and_vgg_with_batch_norm(tmp_path):
    root = zh.write_hickle_dataset(tmp_path / "hkl", n_train_files=8, n_val_files=2, batch=16, n_classes=4,
                                   layout="chwb", labels_file=True, mean=False)
    model = zh.make_model(VGG, data_dir=str(root), layout="chwb", prefetch=False, batch_norm=True, **VGG11)
    assert model.data.train.labels is not None and model.data.mean is None
    assert sum(isinstance(lyr, L.BatchNormLayer) for lyr in L.get_all_layers(model.network)) == 8
    losses = zh.train_epochs(model, 6)
    assert np.all(np.isfinite(losses)) and np.mean(losses[-8:]) < 0.7 * np.mean(losses[:8]), losses


@pytest.mark.slow
def test_dropout_masks_differ_between_ranks_parameters_do_not(hickle_dir):
    a = zh.make_model(AlexNet, rank=0, size=2, data_dir=str(hickle_dir), **ALEXNET)
    b = zh.make_model(AlexNet, rank=1, size=2, data_dir=str(hickle_dir), **ALEXNET)
    for p, q in zip(a.params, b.params):
        np.testing.assert_array_equal(p.get_value(), q.get_value())
    da = [lyr._seed for lyr in L.get_all_layers(a.network) if isinstance(lyr, L.DropoutLayer)]
    db = [lyr._seed for lyr in L.get_all_layers(b.network) if isinstance(lyr, L.DropoutLayer)]
    assert len(set(da + db)) == 4
    a.cleanup(), b.cleanup()


def test_imagenet_defaults_and_small_inputs(hickle_dir):
    from theanompi.models.contract import WorkerConfig

    options = {"data": "synthetic", "input_size": 227, "fc_width": 64, "n_classes": 10, "train_size": 2, "val_size": 1,
               "prefetch": False}
    alex = AlexNet(WorkerConfig(0, 1, 0, "cpu0", model_options=options))
    layers = L.get_all_layers(alex.network)
    shapes = [lyr.output_shape for lyr in layers if isinstance(lyr, L.MaxPool2DLayer)]
    assert alex.stem == "imagenet" and shapes == [(None, 96, 27, 27), (None, 256, 13, 13), (None, 256, 6, 6)]
    conv = sum(L.count_params(lyr) - L.count_params(lyr.input_layer)
               for lyr in layers if isinstance(lyr, L.Conv2DLayer))
    assert conv == 3_747_200  # the single-tower AlexNet's convolutions (+ 58.6M in fc6-fc8 at 4096 wide)
    with pytest.raises(ConfigError, match="too small for stem=imagenet"):
        AlexNet(WorkerConfig(0, 1, 0, "cpu0", model_options={"data_dir": str(hickle_dir), "input_size": 32,
                                                             "stem": "imagenet", "n_classes": 4}))
    with pytest.raises(ConfigError, match="MODEL_INPUT_SIZE >= 32"):
        VGG(WorkerConfig(0, 1, 0, "cpu0", model_options={"data_dir": str(hickle_dir), "input_size": 24,
                                                         "n_classes": 4}))
    with pytest.raises(ConfigError, match="has no 'train' directory"):
        VGG.validate_options({"data_dir": str(hickle_dir / "train")})
