"""GOSGD without ranks: merge arithmetic (numpy), messages, options.
(Sessions under a real mpiexec: tests/sessions/test_gosgd.py.)"""

import numpy as np
import pytest
from conftest import plan

from theanompi.core.errors import ConfigError
from theanompi.core.options import fraction as probability
from theanompi.rules import GOSGD, get_rule
from theanompi.rules.gosgd import header_slots, merge, pack_message, unpack_message


# ----- pure numpy ---------------------------------------------------------------------------
def test_merge_is_the_weighted_mean_and_adds_weights():
    rng = np.random.default_rng(0)
    x, x_j = rng.standard_normal(50).astype("float32"), rng.standard_normal(50).astype("float32")
    a, a_j = 0.375, 0.125
    expected = (a * x.astype("float64") + a_j * x_j) / (a + a_j)
    y = x.copy()
    assert merge(y, a, x_j, a_j) == 0.5
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    assert y.dtype == np.float32
    z = x.astype("float64")
    merge(z, a, x_j.astype("float64"), a_j)
    np.testing.assert_allclose(z, expected, rtol=1e-14, atol=1e-14)


def test_sequential_merges_equal_the_weighted_mean_of_all_messages():
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((4, 20))
    ws = np.array([0.25, 0.125, 0.0625, 0.03125])
    x, a = xs[0].copy(), ws[0]
    for x_j, a_j in zip(xs[1:], ws[1:]):
        a = merge(x, a, x_j, a_j)
    assert a == ws.sum()
    np.testing.assert_allclose(x, ws @ xs / ws.sum(), rtol=1e-13)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_simulated_gossip_conserves_weights_and_the_weighted_sum(n):
    """Random steps, pushes and merges (p=0.5, delayed delivery): the sum of weights stays 1 and
    sum(a_i x_i) over workers and in-flight messages changes only by the local steps."""
    rng = np.random.default_rng(n)
    xs = [rng.standard_normal(8) for _ in range(n)]
    a = [1.0 / n] * n
    invariant = sum(w * x for w, x in zip(a, xs))
    inbox: list[list] = [[] for _ in range(n)]
    for _ in range(300):
        i = int(rng.integers(n))
        for x_j, a_j in inbox[i]:
            a[i] = merge(xs[i], a[i], x_j, a_j)
        inbox[i].clear()
        step = 0.01 * rng.standard_normal(8)  # a local step moves the weighted sum by a_i * step
        xs[i] += step
        invariant = invariant + a[i] * step
        if rng.random() < 0.5:
            j = int(rng.integers(n - 1))
            j += j >= i
            a[i] *= 0.5
            buf = pack_message(xs[i], a[i], np.empty(header_slots("float64") + 8))
            msg = unpack_message(buf.copy())
            inbox[j].append((msg[0].copy(), msg[1]))
        in_flight = [m for box in inbox for m in box]
        total = sum(a) + sum(w for _, w in in_flight)
        assert abs(total - 1.0) < 1e-12
        weighted = sum(w * x for w, x in zip(a, xs)) + sum(w * x for x, w in in_flight)
        np.testing.assert_allclose(weighted, invariant, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_message_carries_the_weight_in_float64(dtype):
    x = np.arange(5).astype(dtype)
    buf = pack_message(x, 1.0 / 3.0, np.empty(header_slots(dtype) + 5, dtype))
    got, w = unpack_message(buf)
    assert w == 1.0 / 3.0 and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, x)


def test_option_p():
    assert probability("1") == 1.0 and probability(0.2) == 0.2
    assert get_rule("gosgd") is GOSGD
    spec, ranks = plan(GOSGD, ["cpu0", "cpu1"], "theanompi.models.mlp", "MLP", p=0.2)
    assert spec.options.p == 0.2 and len(ranks) == 2
    assert plan(GOSGD, ["cpu0"], "theanompi.models.mlp", "MLP")[0].options.p == 0.1
    for bad in (0, 1.5, "x", True, float("nan")):
        with pytest.raises(ConfigError, match="GOSGD_P=.* is not allowed; use a number in \\(0, 1\\]"):
            plan(GOSGD, ["cpu0", "cpu1"], "theanompi.models.mlp", "MLP", p=bad)
