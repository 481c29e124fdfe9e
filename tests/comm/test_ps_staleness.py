"""ASGD_STALENESS: each mode's adjustment, and a table shard's pushes, against NumPy references of the formulas."""

import numpy as np
import pytest

from theanompi.comm.ps.shard import TableShard
from theanompi.comm.ps.staleness import MEAN_SQUARE_DECAY, make_staleness
from theanompi.core.errors import ConfigError
from theanompi.core.session_options import STALENESS_MODES, ASGDOptions


def random_pushes(rng, n, shape):
    return [rng.standard_normal(shape) for _ in range(n)]


def test_none_applies_the_push_as_it_is():
    push = np.arange(6.0).reshape(3, 2)
    out = make_staleness("none", (3, 2), "float64", descends=False).adjust(push, slice(None), 7, None)
    np.testing.assert_array_equal(out, push)


@pytest.mark.parametrize("staleness, factor", [(0, 1.0), (1, 1.0), (2, 0.5), (5, 0.2)])
def test_scale_divides_by_the_staleness(staleness, factor):
    push = np.random.default_rng(0).standard_normal((4, 1)).astype("float32")
    out = make_staleness("scale", (4, 1), "float32", descends=True).adjust(push, slice(None), staleness, None)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, push * factor, rtol=1e-6)


@pytest.mark.parametrize("descends", [True, False])
def test_compensate_follows_dc_asgd_a(descends):
    """p + s * lam0 * p*p / (sqrt(ms) + eps) * (w - w_bak), ms the running mean square (Zheng et al. 2017)."""
    rng = np.random.default_rng(1)
    shape, lam0, eps = (5, 3), 0.7, 1e-8
    dc = make_staleness("compensate", shape, "float64", descends=descends, dc_lambda=lam0)
    ms = np.zeros(shape)
    sign = 1.0 if descends else -1.0
    for push in random_pushes(rng, 6, shape):
        drift = rng.standard_normal(shape)
        ms = MEAN_SQUARE_DECAY * ms + (1 - MEAN_SQUARE_DECAY) * push ** 2
        expected = push + sign * lam0 * push ** 2 / (np.sqrt(ms) + eps) * drift
        np.testing.assert_allclose(dc.adjust(push, slice(None), 3, drift), expected, rtol=1e-12)


def test_compensate_on_rows_keeps_each_rows_mean_square():
    rng = np.random.default_rng(2)
    dc = make_staleness("compensate", (6, 1), "float64", descends=True, dc_lambda=1.0)
    ms = np.zeros((6, 1))
    for rows in (np.array([0, 2]), np.array([2, 5, 1]), slice(None)):
        push = rng.standard_normal(ms[rows].shape)
        drift = rng.standard_normal(ms[rows].shape)
        ms[rows] = MEAN_SQUARE_DECAY * ms[rows] + (1 - MEAN_SQUARE_DECAY) * push ** 2
        expected = push + push ** 2 / (np.sqrt(ms[rows]) + 1e-8) * drift
        np.testing.assert_allclose(dc.adjust(push, rows, 1, drift), expected, rtol=1e-12)


def test_compensate_without_a_pull_applies_the_push_as_it_is():
    push = np.ones((2, 1))
    out = make_staleness("compensate", (2, 1), "float64", descends=True).adjust(push, slice(None), 4, None)
    np.testing.assert_array_equal(out, push)


def test_unknown_mode_is_refused():
    with pytest.raises(ConfigError, match="staleness 'later' is not allowed; use one of: none, scale, compensate"):
        make_staleness("later", (1, 1), "float64", descends=True)


def test_the_option_lists_every_mode():
    assert ASGDOptions.schema()["staleness"].cfg_key == "ASGD_STALENESS"
    assert STALENESS_MODES == ("none", "scale", "compensate")
    for mode in STALENESS_MODES:
        assert ASGDOptions.parse({"staleness": mode}).staleness == mode
    with pytest.raises(ConfigError, match="ASGD_STALENESS='sometimes' is not allowed"):
        ASGDOptions.from_cfg({"ASGD_STALENESS": "sometimes"})


# ----- a shard: the staleness it measures per push, and each mode on top of each updater --------------------------
def replay(shard, events):
    """Apply ('get', client) / ('add', client, push) events; the staleness of each add."""
    seen, out = {}, []
    for event in events:
        if event[0] == "get":
            shard.pulled(event[1], None)
            seen[event[1]] = shard.version
        else:
            out.append(shard.add(event[1], None, event[2], seen.get(event[1], 0)))
    return out


def interleaved(rng, shape):
    """Two clients pulling and pushing out of step: staleness 0, 1, 0, 1, 2."""
    pushes = random_pushes(rng, 5, shape)
    return [("get", 1), ("get", 2), ("add", 2, pushes[0]), ("add", 1, pushes[1]), ("get", 2), ("get", 1),
            ("add", 1, pushes[2]), ("add", 2, pushes[3]), ("add", 1, pushes[4])]


def reference(events, updater_step, mode, descends, lam0=2.0):
    """NumPy replay of the same events: the staleness each add had and the values after."""
    w = np.zeros(events[2][2].shape)
    version, seen, backup, ms, staleness = 0, {}, {}, np.zeros_like(w), []
    for event in events:
        if event[0] == "get":
            seen[event[1]], backup[event[1]] = version, w.copy()
            continue
        client, p = event[1], event[2]
        tau = version - seen[client]
        staleness.append(tau)
        if mode == "scale":
            p = p / max(1, tau)
        elif mode == "compensate":
            ms = MEAN_SQUARE_DECAY * ms + (1 - MEAN_SQUARE_DECAY) * p ** 2
            p = p + (1.0 if descends else -1.0) * lam0 * p ** 2 / (np.sqrt(ms) + 1e-8) * (w - backup[client])
        w = updater_step(w, p)
        version += 1
    return staleness, w


@pytest.mark.parametrize("mode", STALENESS_MODES)
@pytest.mark.parametrize("updater", ["add", "sgd", "momentum"])
def test_shard_applies_each_mode_before_its_updater(mode, updater):
    rng = np.random.default_rng(3)
    events = interleaved(rng, (4, 2))
    shard = TableShard.create(0, 4, 2, "float64", 0, 4, updater, mode, lr=0.1, momentum=0.5)
    velocity = np.zeros((4, 2))

    def step(w, p):
        nonlocal velocity
        if updater == "add":
            return w + p
        if updater == "sgd":
            return w - 0.1 * p
        velocity = 0.5 * velocity + p
        return w - 0.1 * velocity

    staleness, expected = reference(events, step, mode, descends=updater != "add")
    assert replay(shard, events) == staleness == [0, 1, 0, 1, 2]
    np.testing.assert_allclose(shard.values, expected, rtol=1e-12)
    assert shard.version == 5


def test_shard_keeps_what_each_client_pulled_only_when_compensating():
    plain = TableShard.create(0, 2, 1, "float32", 0, 2, "add", "scale")
    plain.pulled(1, None)
    assert plain.backups == {}
    dc = TableShard.create(0, 4, 1, "float32", 0, 4, "add", "compensate")
    dc.values[:] = [[1], [2], [3], [4]]
    dc.pulled(1, np.array([1, 3]))
    dc.values[:] += 10
    dc.pulled(1, np.array([0]))
    np.testing.assert_array_equal(dc.backups[1].ravel(), [11, 2, 3, 4])  # rows as each was last pulled
