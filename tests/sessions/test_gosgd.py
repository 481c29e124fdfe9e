"""GOSGD under a real mpiexec: bad options at the launcher, learning, protocol stress, a short shard.
(Merge arithmetic, messages and options without ranks: tests/rules/test_gosgd_rule.py.)"""

import json

import numpy as np
import pytest
from conftest import ASSETS, run_launcher, run_mpi, run_rule_init, stress_reps, write_cfg

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
