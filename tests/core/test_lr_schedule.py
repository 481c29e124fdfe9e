"""LR_SCHEDULE composed with LR_SCALING and WARMUP_EPOCHS: every schedule against its closed form, evaluated
independently in NumPy over a grid of progress values."""

import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.lr_schedule import LRSchedule
from theanompi.core.option_checks import check_lr_schedule
from theanompi.core.session_options import SessionOptions

PROGRESS = np.linspace(0.0, 12.0, 97)  # epochs, fractional: every 1/8 epoch over a 12-epoch session and past it


def ramp_reference(p, n_workers, scaling, warmup, start=1.0):
    full = {"none": 1.0, "linear": float(n_workers), "sqrt": np.sqrt(n_workers)}[scaling]
    if warmup <= 0:
        return np.full_like(p, full)
    return np.where(p >= warmup, full, start + (full - start) * p / warmup)


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


@pytest.mark.parametrize("scaling", ["none", "linear", "sqrt"])
@pytest.mark.parametrize("kind", ["constant", "cosine"])
def test_a_warm_up_from_a_start_factor(scaling, kind):
    """WARMUP_START_FACTOR: the ramp starts at that fraction of the base rate, scaled or not (LinearLR's
    start_factor); the cosine multiplies the ramp as it does a scaled one."""
    s = LRSchedule(kind, n_epochs=10, n_workers=8, scaling=scaling, warmup_epochs=2.5, warmup_start=0.125)
    got = np.array([s.lr(0.04, p) for p in PROGRESS])
    cosine = 0.5 * (1 + np.cos(np.pi * np.minimum(PROGRESS, 10.0) / 10.0)) if kind == "cosine" else 1.0
    np.testing.assert_allclose(got, 0.04 * ramp_reference(PROGRESS, 8, scaling, 2.5, start=0.125) * cosine,
                               rtol=1e-12, atol=1e-15)
    assert s.lr(0.04, 0.0) == pytest.approx(0.04 * 0.125)
    assert [s.varies_within(e) for e in (0, 2, 3)] == [True, True, kind == "cosine"]
    assert not s.is_constant()


def test_a_start_factor_of_one_without_scaling_is_no_warm_up():
    s = LRSchedule(n_epochs=10, n_workers=4, warmup_epochs=3.0)  # WARMUP_EPOCHS alone ramps nothing
    assert s.is_constant() and not s.varies_within(0) and s.lr(0.1, 0.5) == 0.1


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


def test_a_start_factor_needs_warmup_epochs_and_a_fraction():
    with pytest.raises(ConfigError, match=r"^WARMUP_START_FACTOR=0.125 needs WARMUP_EPOCHS \(the epochs over which "
                                          r"the learning rate ramps up from it\), e.g. WARMUP_EPOCHS=3$"):
        check_lr_schedule(SessionOptions(warmup_start_factor=0.125))
    check_lr_schedule(SessionOptions(warmup_start_factor=0.125, warmup_epochs=3))
    for bad in ("0", "1.5", "-0.1"):
        with pytest.raises(ConfigError, match=f"WARMUP_START_FACTOR='{bad}' is not allowed"):
            SessionOptions.from_cfg({"WARMUP_START_FACTOR": bad})
    assert SessionOptions.from_cfg({"WARMUP_START_FACTOR": "0.125"}).warmup_start_factor == 0.125
