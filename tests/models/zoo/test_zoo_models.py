"""Model zoo, in process (no MPI): options, the registry, and CifarCNN/LSTM learning on the digits."""

import importlib
import sys

import numpy as np
import pytest
from conftest import ASSETS

from theanompi.core.errors import ConfigError
from theanompi.core.options import InvalidValue, int_list, parse_int_list
from theanompi.models import zoo
from theanompi.models.contract import check_model_class
from theanompi.models.zoo.lstm import LSTMClassifier
from theanompi.models.zoo.small_cnn import CifarCNN

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh


def test_registry_names_importable_contract_classes():
    for name, module in zoo.MODELS.items():
        cls = getattr(importlib.import_module(module), name)
        check_model_class(cls)
        assert callable(cls.validate_options) and cls.__doc__ and sys.modules[module].__doc__


@pytest.mark.parametrize("cls, options, fragment", [
    (CifarCNN, {"widths": "32"}, "widths='32' is not allowed; use a comma list of 2 integers"),
    (CifarCNN, {"data": "imagenet"}, "data='imagenet' is not allowed; use one of: digits, cifar10, synthetic, hickle"),
    (CifarCNN, {"data": "hickle", "data_dir": "."},
     "data='hickle' is not allowed; use one of: cifar10, synthetic, digits"),
    (CifarCNN, {}, "data=cifar10 needs MODEL_DATA_DIR"),
    (CifarCNN, {"data_dir": "/no/such/dir"}, "MODEL_DATA_DIR='/no/such/dir' is not a directory"),
    (CifarCNN, {"data": "digits", "n_classes": 5}, "data=digits has 10 classes"),
    (CifarCNN, {"data": "digits", "augment": True}, "flipped digits are other symbols"),
    (CifarCNN, {"data": "digits", "depth": 3}, "unknown model option 'depth' (cfg MODEL_DEPTH)"),
    (CifarCNN, {"data": "digits", "lr_decay_epochs": "5,x"}, "lr_decay_epochs='5,x' is not allowed"),
    (LSTMClassifier, {"num_units": 0}, "num_units=0 is not allowed; use an integer >= 1"),
    (LSTMClassifier, {"data": "cifar10"}, "data='cifar10' is not allowed; use one of: digits, synthetic"),
])
def test_bad_options_end_with_one_config_error(cls, options, fragment):
    with pytest.raises(ConfigError) as info:
        cls.validate_options(options)
    assert fragment in str(info.value)


def test_int_lists_from_cfg_text():
    assert parse_int_list("16, 32,64") == (16, 32, 64) and parse_int_list(8) == (8,)
    parse = int_list(length=2)
    assert parse("32,64") == "32,64"
    for bad in ("32", "a,b", True):
        with pytest.raises(InvalidValue, match="^use a comma list of 2 integers >= 1 such as '16,16'$"):
            parse(bad)


@pytest.mark.slow
def test_cifar_cnn_is_the_benchmark_net_and_learns_digits():
    model = zh.make_model(CifarCNN, data="digits", batch_size=32, lr=0.05)
    import theanompi.nn as L

    kinds = [type(lyr).__name__ for lyr in L.get_all_layers(model.network)]
    assert kinds == ["InputLayer", "Conv2DLayer", "MaxPool2DLayer", "Conv2DLayer", "MaxPool2DLayer", "DenseLayer"]
    shapes = [p.get_value().shape for p in model.params]
    assert shapes == [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (256, 10), (10,)]
    _, err0 = zh.validate(model)
    losses = zh.train_epochs(model, 2)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    _, err = zh.validate(model)
    assert err < 0.15 and err < err0 - 0.5, (err0, err)


def test_identical_initialisation_on_every_rank_from_the_seed():
    a = CifarCNN(zh_config(rank=0))
    b = CifarCNN(zh_config(rank=1))
    c = CifarCNN(zh_config(rank=0, seed=1))
    for p, q in zip(a.params, b.params):
        np.testing.assert_array_equal(p.get_value(), q.get_value())
    assert any(not np.array_equal(p.get_value(), q.get_value()) for p, q in zip(a.params, c.params))


def zh_config(rank=0, seed=0, **options):
    from theanompi.models.contract import WorkerConfig

    return WorkerConfig(rank=rank, size=2, seed=seed, device=f"cpu{rank}", model_options={"data": "digits", **options})


def test_step_lr_decay_and_crop_augmentation():
    m = CifarCNN(zh_config(lr=0.1, lr_decay_epochs="2,4", lr_decay=0.5, augment="crop"))
    lrs = []
    for epoch in range(6):
        m.adjust_hyperp(epoch)
        lrs.append(float(m.lr.get_value()))
    np.testing.assert_allclose(lrs, [0.1, 0.1, 0.05, 0.05, 0.025, 0.025], rtol=1e-6)
    m.adjust_hyperp(0)
    xb, yb = m.data.train_batch(0)
    raw, raw_y = m.data.data.train_batch(0)
    assert xb.shape == raw.shape and np.array_equal(yb, raw_y) and not np.array_equal(xb, raw)
    assert np.array_equal(m.data.train_batch(0)[0], xb)  # seeded by (seed, epoch, slot): reproducible


@pytest.mark.slow
def test_lstm_reads_digits_row_by_row_and_learns():
    model = zh.make_model(LSTMClassifier, num_units=32, batch_size=32)
    assert model.data.x_train.shape[1:] == (8, 8)
    _, err0 = zh.validate(model)
    losses = zh.train_epochs(model, 4)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    _, err = zh.validate(model)
    assert err < 0.3 and err < err0 - 0.4, (err0, err)  # about 15 % after 4 epochs, 7 % after 8


@pytest.mark.slow
def test_stacked_lstm_on_synthetic_sequences():
    opts = dict(data="synthetic", seq_len=5, n_features=3, n_classes=3, num_units=8, num_layers=2,
                train_size=256, val_size=64, batch_size=16)
    model = zh.make_model(LSTMClassifier, **opts)
    import theanompi.nn as L

    lstms = [lyr for lyr in L.get_all_layers(model.network) if isinstance(lyr, L.LSTMLayer)]
    assert model.data.x_train.shape[1:] == (5, 3) and len(lstms) == 2
    assert lstms[0].output_shape == (None, 5, 8) and lstms[1].output_shape == (None, 8)
    losses = zh.train_epochs(model, 8)  # measured: mean loss 1.10 in epoch 1, 0.71 in epoch 6, ~0.4 in epoch 8
    assert np.all(np.isfinite(losses)) and np.mean(losses[-8:]) < 0.7 * np.mean(losses[:8]), losses
