"""LR_SCHEDULE composed with LR_SCALING and WARMUP_EPOCHS: every schedule against its closed form, evaluated
independently in NumPy over a grid of progress values."""

import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.lr_schedule import LRSchedule
from theanompi.core.option_checks import check_lr_schedule
from theanompi.core.session_options import SessionOptions

PROGRESS = np.linspace(0.0, 12.0, 97)  # epochs, fractional: every 1/8 epoch over a 12-epoch session and past it


def ramp_reference(p, n_workers, scaling, warmup):
    if scaling == "none":
        return np.ones_like(p)
    full = float(n_workers) if scaling == "linear" else np.sqrt(n_workers)
    if warmup <= 0:
        return np.full_like(p, full)
    return np.where(p >= warmup, full, 1.0 + (full - 1.0) * p / warmup)


@pytest.mark.parametrize("scaling, warmup", [("none", 0.0), ("linear", 0.0), ("linear", 2.5), ("sqrt", 0.0),
                                             ("sqrt", 2.5)])
def test_constant_is_the_scaled_rate(scaling, warmup):
    s = LRSchedule("constant", n_epochs=10, n_workers=4, scaling=scaling, warmup_epochs=warmup)
    got = np.array([s.lr(0.05, p) for p in PROGRESS])
    np.testing.assert_allclose(got, 0.05 * ramp_reference(PROGRESS, 4, scaling, warmup), rtol=1e-12)


@pytest.mark.parametrize("scaling, warmup", [("none", 0.0), ("linear", 1.5)])
def test_step_multiplies_by_the_decay_at_each_milestone(scaling, warmup):
    s = LRSchedule("step", n_epochs=10, n_workers=8, scaling=scaling, warmup_epochs=warmup, decay_epochs="3,7",
                   decay=0.2)
    got = np.array([s.lr(0.1, p) for p in PROGRESS])
    passed = (PROGRESS >= 3).astype(int) + (PROGRESS >= 7).astype(int)
    np.testing.assert_allclose(got, 0.1 * ramp_reference(PROGRESS, 8, scaling, warmup) * 0.2 ** passed, rtol=1e-12)


@pytest.mark.parametrize("lr_min", [0.0, 0.001])
@pytest.mark.parametrize("scaling, warmup", [("none", 0.0), ("linear", 2.0), ("sqrt", 2.0)])
def test_cosine_goes_from_the_peak_to_lr_min_over_the_session(lr_min, scaling, warmup):
    s = LRSchedule("cosine", n_epochs=10, n_workers=2, scaling=scaling, warmup_epochs=warmup, lr_min=lr_min)
    got = np.array([s.lr(0.02, p) for p in PROGRESS])
    peak = 0.02 * ramp_reference(PROGRESS, 2, scaling, warmup)
    weight = 0.5 * (1 + np.cos(np.pi * np.minimum(PROGRESS, 10.0) / 10.0))
    np.testing.assert_allclose(got, lr_min + (peak - lr_min) * weight, rtol=1e-12, atol=1e-15)
    assert s.lr(0.02, 10.0) == pytest.approx(lr_min) and s.lr(0.02, 11.5) == pytest.approx(lr_min)


def test_when_the_rate_changes_inside_an_epoch():
    assert not LRSchedule("step", decay_epochs="2").varies_within(1)
    assert LRSchedule("cosine").varies_within(0)
    for scaling in ("linear", "sqrt"):
        warm = LRSchedule("step", n_workers=4, scaling=scaling, warmup_epochs=1.5, decay_epochs="5")
        assert [warm.varies_within(e) for e in (0, 1, 2)] == [True, True, False]
        assert not warm.is_constant()
    assert LRSchedule(n_workers=4, scaling="sqrt").is_constant()  # no warm-up: the factor from the start


def test_of_session_reads_the_options():
    options = SessionOptions.parse({"lr_schedule": "step", "lr_decay_epochs": "4, 8", "lr_decay": "0.5",
                                    "lr_scaling": "linear", "warmup_epochs": 1})
    s = LRSchedule.of_session(options, n_workers=3, n_epochs=12)
    assert (s.kind, s.decay_epochs, s.decay, s.n_workers, s.n_epochs) == ("step", "4,8", 0.5, 3, 12)
    assert s.lr(1.0, 9.0) == pytest.approx(3 * 0.25)


def test_step_without_milestones_is_refused_at_launch():
    with pytest.raises(ConfigError, match="LR_SCHEDULE='step' needs LR_DECAY_EPOCHS"):
        check_lr_schedule(SessionOptions(lr_schedule="step"))
    check_lr_schedule(SessionOptions(lr_schedule="step", lr_decay_epochs="3"))
    with pytest.raises(ConfigError, match="LR_SCHEDULE='linear' is not allowed"):
        SessionOptions.from_cfg({"LR_SCHEDULE": "linear"})
    with pytest.raises(ConfigError, match="LR_SCALING='log' is not allowed; use one of: none, linear, sqrt"):
        SessionOptions.from_cfg({"LR_SCALING": "log"})
    with pytest.raises(ConfigError, match="EMA_DECAY='1' is not allowed"):
        SessionOptions.from_cfg({"EMA_DECAY": "1"})
