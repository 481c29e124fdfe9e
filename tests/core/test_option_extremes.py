"""Every session option fed its extremes (issue 39, item 7): the options are generated from the options table
(every rule's class, so an option added later is fed them too), the extremes are the same for all.

A value is either refused in one line naming the option's key (ConfigError, nothing else), or accepted -- and then:
it travels in session.json (JSON without NaN), an integer fits what C and JSON hold exactly (|n| <= 2**53), a
number is finite, a text holds no NUL; the launch plan takes it or refuses it in one line; and where the value
reaches a library (a seed into NumPy, PyTorch and JAX; seconds into a clock's wait; megabytes into the exchange's
buckets; a step count into an int64 buffer) that library takes it. (A session with SEED at its largest:
tests/sessions/test_allocation_bounds.py.)
"""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.session_options import OPTIONS_BY_RULE

#: the same extremes for every option: numbers at and past what C types hold, non-finite ones, the tiniest, texts
EXTREMES = [-1, 0, 1, 2**31, 2**32 - 1, 2**32, 2**53, 2**63, 2**64, 10**30, -(10**30), 1e-320, 1e-3, 0.5, 1e12,
            1e308, float("inf"), float("-inf"), float("nan"), "", " ", "x" * 5000, "a\0b", "1e3", "0x10", True,
            False, "true", "none", "cdd", [1], {}]


def all_options():
    """(options class, field name, Option) for every option of every rule, each cfg key once per class."""
    return [(cls, name, opt) for cls in OPTIONS_BY_RULE.values() for name, opt in cls.schema().items()]


IDS = [f"{cls.rule}:{opt.cfg_key}" for cls, _, opt in all_options()]


def _seed(value: int) -> None:
    """What the ranks do with SEED: NumPy's generators (a rank's and an epoch's streams too), PyTorch, JAX."""
    np.random.RandomState(value)
    np.random.default_rng([value, 65535, 1611, 10**6]).permutation(3)
    torch = pytest.importorskip("torch")
    torch.manual_seed(value)
    try:
        import jax
    except ImportError:
        return
    jax.random.PRNGKey(value)


def _seconds(value: float) -> None:
    """A duration: a clock's wait takes it, and ssh's ConnectTimeout (half of STARTUP_TIMEOUT) is a C int."""
    from theanompi.launch.startup import ssh_options

    assert threading.Lock().acquire(timeout=value)
    timeout = int(ssh_options({}, value)["PRTE_MCA_plm_ssh_args"].split("ConnectTimeout=")[1].split()[0])
    assert 0 < timeout < 2**31


def _bucket_mb(value: float) -> None:
    from theanompi.comm.exchange.overlap import plan_buckets

    if value:
        buckets = plan_buckets([10, 1000, 10**6], itemsize=4, bucket_bytes=value * 2**20)
        assert 1 <= len(buckets) <= 3


def _steps(value: int) -> None:
    """A count of steps: it travels in an int64 buffer (EASGD's grants, the exchanges' counters)."""
    np.zeros(1, dtype=np.int64)[0] = value


def _max_ranks(value: int) -> None:
    from theanompi.core.option_checks import ranks_per_host_limit

    assert 1 <= ranks_per_host_limit(value)[0] <= 65536


#: cfg key -> what uses an accepted value (beyond what every option is checked for)
USES = {"SEED": _seed, "PROGRESS_EVERY": _seconds, "WATCHDOG": _seconds, "WATCHDOG_BUILD": _seconds,
        "STARTUP_TIMEOUT": _seconds, "BSP_BUCKET_MB": _bucket_mb, "EASGD_TAU": _steps, "BSP_AVG_FREQ": _steps,
        "ASGD_FREQ": _steps, "TENSORBOARD_EVERY": _steps, "CHECKPOINT_EVERY": _steps, "N_EPOCHS": _steps,
        "MAX_RANKS_PER_HOST": _max_ranks}


@pytest.mark.parametrize("cls, name, opt", all_options(), ids=IDS)
def test_every_option_refuses_in_one_line_or_takes_what_its_use_takes(cls, name, opt):
    for extreme in EXTREMES:
        try:
            value = opt.convert(extreme)
        except ConfigError as err:
            text = str(err)
            assert "\n" not in text and text.startswith(f"{opt.cfg_key}="), text
            continue
        travelled = cls.from_dict(json.loads(json.dumps(cls(**{name: value}).to_dict(), allow_nan=False)))
        assert getattr(travelled, name) == value
        if isinstance(value, int) and not isinstance(value, bool):
            assert abs(value) <= 2**53, f"{opt.cfg_key}={extreme!r} accepted as {value}: past what C and JSON hold"
        if isinstance(value, float):
            assert math.isfinite(value), f"{opt.cfg_key}={extreme!r} accepted as {value}"
        if isinstance(value, str):
            assert "\0" not in value and len(value.encode()) <= 4096, f"{opt.cfg_key} took {extreme!r}"
        if opt.cfg_key in USES and not isinstance(value, bool):
            USES[opt.cfg_key](value)


def test_seed_is_bounded_to_what_numpy_torch_and_jax_take():
    from theanompi.core.session_options import MAX_SEED, BSPOptions

    assert BSPOptions.parse({"seed": MAX_SEED}).seed == 2**32 - 1
    with pytest.raises(ConfigError, match=r"^SEED=18446744073709551616 is not allowed; use an integer from 0 to "
                                          r"4294967295$"):
        BSPOptions.parse({"seed": 2**64})
    for value in ("1e12", "1e-320"):
        with pytest.raises(ConfigError, match=rf"^BSP_BUCKET_MB='{value}' is not allowed; use 0, or a number from "
                                              r"0.001 to 4096$"):
            BSPOptions.from_cfg({"BSP_BUCKET_MB": value})


@pytest.mark.slow
def test_the_launch_plan_takes_every_accepted_extreme_or_refuses_it_in_one_line(tmp_path):
    """What the parsers accept, the plan (the rule's checks, the model's adaptation, the paths) takes or refuses
    in one line: never another error."""
    from theanompi.launch.plan import SessionRequest, plan_session
    from theanompi.rules import get_rule

    for cls, name, opt in all_options():
        rule = get_rule(cls.rule)
        devices = ["cpu0", "cpu1", "cpu2"]
        for extreme in EXTREMES:
            try:
                value = opt.convert(extreme)
            except ConfigError:
                continue
            if name in ("run_dir", "checkpoint_dir", "resume") and isinstance(value, str):
                value = str(tmp_path / value[:200])
            try:
                keywords = {"n_epochs": 1, name: value}
                request = SessionRequest.from_keywords(rule, devices, "theanompi.models.mlp", "MLP",
                                                       cwd=str(tmp_path), **keywords)
                plan_session(request)
            except ConfigError as err:
                assert "\n" not in str(err), str(err)
