"""WGAN on the digits: it trains (pixel statistics approach the data's), the cdd two-phase step, clipping."""

import sys

import numpy as np
import pytest
from conftest import ASSETS

from theanompi.core.errors import ConfigError
from theanompi.models.contract import check_model_instance
from theanompi.models.zoo.gans import WGAN

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh


@pytest.mark.slow
def test_generator_pixel_statistics_approach_the_data():
    """Defaults (clip 0.1, RMSProp lr 2e-4, n_critic 5, batch 64), 20 epochs = 480 steps (80 generator steps).
    Measured over seeds 0-3: gap 0.29-0.32 -> 0.07-0.08 at epoch 20; the critic estimate W peaks at 2.5-3.8."""
    gan = zh.make_model(WGAN)
    gap0 = gan.pixel_mean_gap()
    estimates = []
    for epoch in range(0, 20, 5):
        losses = zh.train_epochs(gan, 5, start=epoch)
        estimates.append(np.mean(losses))
    gap = gan.pixel_mean_gap()
    data_std = gan.data.x_train.std(axis=0).mean()
    assert gap0 > 0.25 and gap < 0.5 * gap0, (gap0, gap)
    assert max(estimates) > 1.0, estimates  # the critic learnt to tell real from generated images
    assert gan.sample(1000).std(axis=0).mean() > 0.3 * data_std  # samples vary (no collapse onto one image)
    w_val, gap_val = zh.validate(gan)
    assert np.isfinite(w_val) and 0 <= gap_val < 0.5 * gap0


@pytest.mark.slow
def test_cdd_two_phase_step_equals_the_local_step():
    """Two workers with the same batch: apply_update(2 x vector) must be the local step (1/N folded in)."""
    opts = dict(critic_hidden="16", gen_hidden="16", train_size=256, lr=0.001)  # 2 rank batches of 64 per epoch
    a = zh.make_model(WGAN, size=2, sync_type="cdd", **opts)
    b = zh.make_model(WGAN, size=2, sync_type="local", **opts)
    check_model_instance(a, "cdd")
    n_critic = sum(p.get_value().size for p in a.critic_params)
    n_total = sum(p.get_value().size for p in a.params)
    rec_a, rec_b = zh.StepRecorder(), zh.StepRecorder()
    phases = []
    for epoch in range(6):
        a.adjust_hyperp(epoch), b.adjust_hyperp(epoch)
        for count in range(a.data.n_batch_train):
            before = [p.get_value().copy() for p in a.params]
            vector = a.train_iter(count, rec_a)
            assert all(np.array_equal(p.get_value(), v) for p, v in zip(a.params, before))  # untouched
            assert vector.dtype == np.float32 and vector.shape == (n_total,) and vector.flags.c_contiguous
            phases.append(a.phase(count))
            critic_part, gen_part = vector[:n_critic], vector[n_critic:]
            if phases[-1] == "critic":
                assert critic_part.any() and not gen_part.any()
            else:
                assert gen_part.any() and not critic_part.any()
            a.apply_update(2 * vector)
            b.train_iter(count, rec_b)
    assert phases == (["critic"] * 5 + ["gen"]) * 2
    np.testing.assert_allclose([r[0] for r in rec_a.train], [r[0] for r in rec_b.train], rtol=1e-4, atol=1e-6)
    for p, q in zip(a.params, b.params):
        np.testing.assert_allclose(p.get_value(), q.get_value(), rtol=1e-4, atol=1e-6)
    assert max(np.abs(p.get_value()).max() for p in a.critic_params) <= 0.1 + 1e-7  # clipped
    assert len(a.state_vars) == 1 + len(a.params)  # lr + RMSProp accumulators (checkpointed)


def test_critic_reads_clipped_weights_whatever_moved_them():
    """ASGD's server-side updaters step without clipping: the critic's forward pass clips anyway."""
    gan = zh.make_model(WGAN, critic_hidden="8", gen_hidden="8", train_size=128)
    xb, _ = gan.data.val_batch(0)
    z = gan.noise(len(xb), 0)
    w_before, _ = gan._fns["val"](xb, z)
    W = gan.critic_params[0]
    W.set_value(W.get_value() * 100)  # far outside the box: reads as +-clip
    w_big, _ = gan._fns["val"](xb, z)
    W.set_value(np.clip(W.get_value(), -0.1, 0.1))
    assert np.isclose(gan._fns["val"](xb, z)[0], w_big)
    assert np.isfinite(w_before)


def test_options():
    assert WGAN.validate_options({})["n_critic"] == 5
    with pytest.raises(ConfigError, match="n_critic=0 is not allowed"):
        WGAN.validate_options({"n_critic": 0})
    with pytest.raises(ConfigError, match="unknown model option 'momentum'"):
        WGAN.validate_options({"momentum": 0.9})
