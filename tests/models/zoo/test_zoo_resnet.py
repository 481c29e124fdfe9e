"""CIFAR ResNet: parameter counts (He et al.; Multiverso's ResNet-32), shortcuts, BN statistics, accuracy."""

import sys

import numpy as np
import pytensor
import pytest
from conftest import ASSETS

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.models.contract import WorkerConfig
from theanompi.models.zoo.resnet import ChannelPadShortcut, ResNet, ResNet20, ResNet32

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh


def build(cls, **options):
    return cls(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"data": "synthetic", **options}))


@pytest.mark.slow
@pytest.mark.parametrize("cls, options, expected", [
    (ResNet20, {}, 269_722),              # the paper's 0.27M
    (ResNet32, {}, 464_154),              # Multiverso's ResNet-32 benchmark: 464,154
    (ResNet, {"depth": 20, "shortcut": "B"}, 272_474),  # + two 1x1 projections with BN
])
def test_parameter_counts(cls, options, expected):
    model = build(cls, **options)
    assert model.n_params == expected
    assert L.count_params(model.network, trainable=True) == expected
    convs = [lyr for lyr in L.get_all_layers(model.network)
             if isinstance(lyr, L.Conv2DLayer) and lyr.filter_size == (3, 3)]
    assert len(convs) + 1 == model.hp["depth"]  # 6n+2 = 3x3 convolutions + the dense layer
    assert L.get_output_shape(model.network) == (None, 10)
    assert all(p.name for p in model.params) and len({p.name for p in model.params}) == len(model.params)


def test_depth_must_be_6n_plus_2_and_match_the_named_classes():
    with pytest.raises(ConfigError, match="depth=21 is not allowed; use 6n\\+2"):
        ResNet.validate_options({"depth": 21, "data": "synthetic"})
    with pytest.raises(ConfigError, match="ResNet20 has depth 20; for MODEL_DEPTH=32 use MODELCLASS=ResNet"):
        ResNet20.validate_options({"depth": 32, "data": "synthetic"})
    assert ResNet32.validate_options({"data": "synthetic"})["depth"] == 32


def test_option_a_shortcut_subsamples_and_zero_pads_channels():
    x = np.arange(2 * 2 * 4 * 4, dtype=pytensor.config.floatX).reshape(2, 2, 4, 4)
    layer = ChannelPadShortcut(L.InputLayer((None, 2, 4, 4)), 6, stride=2)
    out = L.get_output(layer, x).eval()
    assert out.shape == (2, 6, 2, 2) == (2,) + layer.output_shape[1:]
    np.testing.assert_array_equal(out[:, 2:4], x[:, :, ::2, ::2])
    assert not out[:, :2].any() and not out[:, 4:].any()


@pytest.mark.slow
def test_validation_uses_running_statistics_and_sync_state_pools_them():
    model = build(ResNet, depth=8, width=4)
    bn = [lyr for lyr in L.get_all_layers(model.network) if isinstance(lyr, L.BatchNormLayer)]
    assert len(bn) == 7 and all(lyr.mean not in model.params for lyr in bn)  # not exchanged by any rule

    class TwoWorkers:  # sums a second worker whose statistics are (mean + 1, same variance)
        def Get_size(self):
            return 2

        def allreduce(self, buffer):
            other = buffer.copy()
            start = 0
            for layer in bn:
                n = layer.mean.get_value().size
                m = buffer[start:start + n]
                other[start:start + n] = m + 1
                other[start + n:start + 2 * n] = buffer[start + n:start + 2 * n] - m ** 2 + (m + 1) ** 2
                start += 2 * n
            return buffer + other

    before = [lyr.mean.get_value().copy() for lyr in bn]
    model.sync_state(TwoWorkers())
    for layer, m in zip(bn, before):
        np.testing.assert_allclose(layer.mean.get_value(), m + 0.5, rtol=1e-5)
    assert L.get_state_updates(model.val_logits) == {}  # validation neither uses nor updates batch statistics
    assert len(L.get_state_updates(model.logits)) == 2 * len(bn)
    assert L.get_state_updates(build(ResNet, depth=8, width=4, bn_eval="batch").val_logits) == {}


@pytest.mark.slow
def test_resnet20_narrow_reaches_95_percent_on_digits():
    """ResNet-20, width 8 (stages of 8/16/32 filters, 67,906 parameters), shortcuts A, on the digits
    (1x8x8: stages at 8x8, 4x4, 2x2), batch 32, lr 0.1, momentum 0.9, weight decay 1e-4, 1 worker.
    Measured: 95.0 / 97.0 / 98.3 % validation accuracy after epochs 2 / 3 / 4 (of 297 images)."""
    model = zh.make_model(ResNet20, data="digits", width=8, batch_size=32, lr=0.1, weight_decay=0.0001)
    assert model.n_params == 67_906
    _, err0 = zh.validate(model)
    losses = zh.train_epochs(model, 4)
    assert np.mean(losses[-10:]) < 0.2 * np.mean(losses[:10]), losses  # the loss falls
    _, err = zh.validate(model)
    assert 1 - err >= 0.95, f"accuracy {1 - err:.4f} (before training {1 - err0:.4f})"
