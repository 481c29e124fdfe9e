"""EASGD under a real mpiexec: bad options at the launcher, learning, exact step counts, protocol stress.
(The launch plan and options without ranks: tests/rules/test_easgd_rule.py.)"""

import json
import math

import pytest
from conftest import ASSETS, run_launcher, run_mpi, run_rule_init, stress_reps, write_cfg

from theanompi.runtime.records import load_final_params

EASGD_MODELS = str(ASSETS / "easgd_models.py")
N_TRAIN = 1500  # digits training samples


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def worker_summaries(run_dir, n):
    return [json.loads((run_dir / "workers" / f"worker-{k}" / "summary.json").read_text()) for k in range(n)]


def shard_batches(n_workers, batch_size):
    return math.ceil(N_TRAIN / (n_workers * batch_size))


def check_counts(run_dir, n_workers, n_epochs, batches):
    """The server's total is exactly n_epochs global epochs and agrees with every worker's own records."""
    result = summary(run_dir)
    workers = worker_summaries(run_dir, n_workers)
    assert result["shard_batches"] == batches == [w["n_batch_train"] for w in workers]
    assert result["global_epoch_iterations"] == sum(batches)
    assert result["iterations"] == n_epochs * sum(batches)
    assert sum(w["iterations"] for w in workers) == result["iterations"]
    assert result["exchanges"] == [w["exchanges"] for w in workers]
    assert [p["iterations"] for p in result["per_worker"]] == [w["iterations"] for w in workers]
    assert len(result["mean_wait_s"]) == n_workers
    assert len((run_dir / "epochs.jsonl").read_text().splitlines()) == n_epochs
    return result, workers


# ----- sessions under mpiexec ---------------------------------------------------------------
@pytest.mark.parametrize("key, value, fragment", [
    ("EASGD_ALPHA", "0", "EASGD_ALPHA='0' is not allowed; use a number in (0, 1]"),
    ("EASGD_TAU", "0", "EASGD_TAU='0' is not allowed; use an integer >= 1"),
])
def test_bad_option_values_end_tmlauncher_with_one_line(tmp_path, key, value, fragment):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="EASGD", DEVICES="cpu0,cpu1,cpu2", **{key: value})
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tmlauncher: error: ") and fragment in lines[0], proc.stderr
    assert seconds < 10 and not (tmp_path / "runs").exists()


def test_two_workers_learn_digits_via_tmlauncher(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="EASGD", DEVICES="cpu0,cpu1,cpu2", N_EPOCHS=8, MODEL_BATCH_SIZE=32,
                    RUN_DIR="easgd")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "starting 3 ranks: cpu0, cpu1, cpu2" in proc.stdout  # the first device is the server's
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("[rank 0] epoch ")]
    assert len(epochs) == 8 and "val loss" in epochs[0] and "samples/s" in epochs[0] and "ETA" in epochs[0]
    assert "final validation accuracy" in proc.stdout
    run_dir = tmp_path / "easgd"
    result, workers = check_counts(run_dir, 2, 8, [shard_batches(2, 32)] * 2)
    assert result["iterations"] == 8 * 48
    assert result["rule"] == "EASGD" and result["workers"] == 2 and result["alpha"] == 0.5 and result["tau"] == 4
    assert result["final_val_accuracy"] >= 0.90
    assert all(w["exchanges"] >= 1 and w["mean_wait_s"] > 0 for w in workers)
    assert all(m is None or m > 0 for m in result["mean_wait_s"])
    assert len(load_final_params(run_dir)) == 4  # W0, b0, W1, b1 of the centre
    assert sorted(p.name for p in (run_dir / "ranks").glob("*.done")) == ["rank-0.done", "rank-1.done", "rank-2.done"]
    assert not list((run_dir / "ranks").glob("*.failed"))


def test_session_learns_via_rule_init_and_wait(tmp_path):
    run_rule_init(tmp_path, "EASGD", devices=['cpu0', 'cpu1', 'cpu2'], modelfile='theanompi.models.mlp',
                  modelclass='MLP', alpha=0.3, tau=7, n_epochs=6, run_dir='easgd', model_options={'batch_size': 32})
    result, _ = check_counts(tmp_path / "easgd", 2, 6, [24, 24])  # 288 steps = 41 blocks of 7 + 1
    assert result["alpha"] == 0.3 and result["tau"] == 7
    assert result["final_val_accuracy"] >= 0.90


def test_worker_with_a_shorter_shard_finishes_without_blocking_the_others(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="EASGD", DEVICES="cpu0,cpu1,cpu2", MODELFILE=EASGD_MODELS,
                    MODELCLASS="NappingShortShard", N_EPOCHS=3, EASGD_TAU=5, MODEL_BATCH_SIZE=32, RUN_DIR="short")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    result, workers = check_counts(tmp_path / "short", 2, 3, [24, 8])  # 96 steps = 19 blocks of 5 + 1
    assert result["iterations"] == 96
    # the short worker simply runs more (shorter) shard epochs while the other one keeps training
    assert workers[1]["shard_epochs"] > workers[0]["shard_epochs"] >= 1


@pytest.mark.timeout(200 + 15 * stress_reps(10))
def test_protocol_stress_random_delays_always_terminate_with_the_exact_count():
    """3 workers + server in one mpiexec job, one EASGD session per round.

    Rounds 1-3: tau=1, every step first sleeps 0-20 ms (seeded per rank and round), so the
    workers reach the server in an unpredictable order. Round 4: tau=50 > the 74 steps of
    the session, so worker 2 is told to stop before its first step and never exchanges.
    """
    n = stress_reps(10)
    rounds = ["RandomSleeper:1:1"] * n + ["ShortShard:1:50"]
    proc = run_mpi("easgd_stress.py", 4, *rounds, timeout=180 + 15 * n)
    assert "easgd stress ok" in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("round ")]
    assert len(lines) == n + 1
    assert "(ShortShard:1:50): 74 steps, exchanges [1, 1, 0]" in lines[-1]
