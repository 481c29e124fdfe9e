"""GOSGD: merge arithmetic (numpy), options, and real mpiexec sessions (learning, protocol stress, short shard)."""

import json

import numpy as np
import pytest
from conftest import ASSETS, plan, run_launcher, run_mpi, run_rule_init, stress_reps, write_cfg

from theanompi.core.errors import ConfigError
from theanompi.core.options import fraction as probability
from theanompi.rules import GOSGD, get_rule
from theanompi.rules.gosgd import header_slots, merge, pack_message, unpack_message
from theanompi.runtime.records import load_final_params


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def check_protocol(s, n_epochs):
    """What every GOSGD session must satisfy, whatever the timing."""
    assert s["rule"] == "GOSGD"
    assert abs(s["sum_weights"] - 1.0) < 1e-12 and abs(sum(s["weights"]) - 1.0) < 1e-12
    assert s["steps"] == [n_epochs * n for n in s["n_batch_train"]]
    sent, received = np.array(s["messages_sent"]), np.array(s["messages_received"])
    assert np.array_equal(sent, received.T), "every message sent was received exactly once"
    assert s["pushes"] == sent.sum(axis=1).tolist() and s["merges"] == received.sum(axis=1).tolist()
    assert np.all(np.diag(sent) == 0), "nobody pushes to itself"


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


@pytest.mark.parametrize("value", ["0", "2"])
def test_bad_p_via_tmlauncher_is_one_line_exit_2(tmp_path, value):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="GOSGD", GOSGD_P=value)
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    expected = f"tmlauncher: error: GOSGD_P='{value}' is not allowed; use a number in (0, 1]"
    assert proc.stderr.strip().splitlines() == [expected]
    assert not (tmp_path / "runs").exists() and seconds < 30


# ----- real sessions --------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_two_workers_learn_digits_via_tmlauncher(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="GOSGD", N_EPOCHS=10, GOSGD_P=0.2, RUN_DIR="g2")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=170)
    assert proc.returncode == 0, proc.stderr
    s = summary(tmp_path / "g2")
    check_protocol(s, n_epochs=10)
    assert s["workers"] == 2 and s["p"] == 0.2
    assert s["final_val_accuracy"] >= 0.90
    assert min(s["pushes"]) > 0
    assert "gossip:" in proc.stdout and "sum of weights 1.0000" in proc.stdout
    records = [json.loads(line) for line in (tmp_path / "g2" / "iterations.jsonl").read_text().splitlines()]
    assert len(records) == s["steps"][0] and any(r["comm"] > 0 for r in records)
    assert len(load_final_params(tmp_path / "g2")) == 4


@pytest.mark.timeout(180)
def test_three_workers_learn_via_rule_init_and_wait(tmp_path):
    run_rule_init(tmp_path, "GOSGD", timeout=170, devices=['cpu0', 'cpu1', 'cpu2'],
                  modelfile='theanompi.models.mlp', modelclass='MLP',
                  n_epochs=10, run_dir='g3', model_options={'hidden': 128})
    s = summary(tmp_path / "g3")
    check_protocol(s, n_epochs=10)
    assert s["workers"] == 3 and s["p"] == 0.1
    assert s["final_val_accuracy"] >= 0.90


@pytest.mark.timeout(180 + 15 * stress_reps(10))
def test_protocol_stress_random_step_times_push_every_step():
    """3 workers, p=1, steps of random 0-20 ms, several sessions in one mpiexec (checks inside the script)."""
    n = stress_reps(10)
    proc = run_mpi("gosgd_stress.py", 3, str(n), timeout=170 + 15 * n)
    assert f"gosgd stress ok {n}" in proc.stdout


@pytest.mark.timeout(180)
def test_worker_with_shorter_shard_waits_receiving_and_finishes(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="GOSGD", MODELFILE=str(ASSETS / "gosgd_models.py"),
                    MODELCLASS="ShortShardMLP", DEVICES="cpu0,cpu1,cpu2", N_EPOCHS=3, GOSGD_P=1.0,
                    MODEL_HIDDEN=32, RUN_DIR="short")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=170)
    assert proc.returncode == 0, proc.stderr
    s = summary(tmp_path / "short")
    check_protocol(s, n_epochs=3)
    full, short = s["n_batch_train"][0], s["n_batch_train"][2]
    assert s["n_batch_train"] == [full, full, short] and short < full
    assert s["idle_merges"][2] > 0, "the short worker kept merging while it waited for the others"
    assert s["epochs"] == 3
