"""ASGD (parameter-server rule) under a real mpiexec."""

import json

import pytest
from conftest import ASSETS, ROOT, run_launcher, run_mpi, run_rule_init, stress_reps, write_cfg

MODELS = str(ASSETS / "asgd_models.py")


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def asgd_cfg(path, **keys):
    return write_cfg(path, RULE="ASGD", **keys)


def test_async_add_learns_digits(tmp_path):
    cfg = asgd_cfg(tmp_path / "s.cfg", N_EPOCHS=8, RUN_DIR="run")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = summary(tmp_path / "run")
    assert result["final_val_accuracy"] >= 0.90
    assert [w["iterations"] for w in result["per_worker"]] == [8 * 24, 8 * 24]
    assert all(w["exchanges"] == 8 * 24 for w in result["per_worker"])
    assert set(result["staleness"]) == {"rank 0", "rank 1"}


def test_sync_momentum_updater_two_servers_via_python(tmp_path):
    run_rule_init(tmp_path, "ASGD", devices=['cpu0', 'cpu1'], modelfile='theanompi.models.mlp', modelclass='MLP',
                  n_epochs=6, sync=True, n_servers=2, updater='momentum', server_lr=0.05, push_freq=2, run_dir='run')
    result = summary(tmp_path / "run")
    assert result["final_val_accuracy"] >= 0.90
    assert result["servers"] == 2 and result["sync"] is True
    assert all(w["exchanges"] == 6 * 12 for w in result["per_worker"])


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_protocol_stress_with_random_delays(mode):
    n = max(30, stress_reps(30))
    proc = run_mpi("stress_ps.py", 4, str(n), mode, timeout=180 + 5 * n)
    assert f"stress ok: {n} repetitions ({mode})" in proc.stdout


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rule_with_random_delays_terminates_with_right_count(tmp_path, seed):
    cfg = asgd_cfg(tmp_path / "s.cfg", MODELFILE=MODELS, MODELCLASS="RandomDelays", DEVICES="cpu0,cpu1,cpu2",
                   N_EPOCHS=1, SEED=seed, ASGD_UPDATER="sgd", ASGD_LR=0.1, RUN_DIR="run")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = summary(tmp_path / "run")
    assert [w["iterations"] for w in result["per_worker"]] == [16, 16, 16]


def test_shorter_shard_finishes_without_blocking_async(tmp_path):
    cfg = asgd_cfg(tmp_path / "s.cfg", MODELFILE=MODELS, MODELCLASS="ShortShard", N_EPOCHS=3, RUN_DIR="run")
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [w["iterations"] for w in summary(tmp_path / "run")["per_worker"]] == [72, 42]


def test_shorter_shard_in_sync_mode_is_an_error_not_a_hang(tmp_path):
    cfg = asgd_cfg(tmp_path / "s.cfg", MODELFILE=MODELS, MODELCLASS="ShortShard", N_EPOCHS=2, ASGD_SYNC="true")
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "workers disagree on n_batch_train: rank 0 has 24, rank 1 has 14" in proc.stderr.strip().splitlines()[-1]
    assert seconds < 60


@pytest.mark.parametrize("key, value, fragment", [
    ("ASGD_UPDATER", "nesterov", "ASGD_UPDATER='nesterov' is not allowed; use one of: add, sgd, momentum, adagrad"),
    ("ASGD_SERVERS", "0", "ASGD_SERVERS='0' is not allowed"),
    ("ASGD_SYNC", "perhaps", "ASGD_SYNC='perhaps' is not allowed; use true or false"),
    ("ASGD_MOMENTUM", "1", "ASGD_MOMENTUM='1' is not allowed; use a number in [0, 1)"),
    ("ASGD_STALENESS", "later", "ASGD_STALENESS='later' is not allowed; use one of: none, scale, compensate"),
    ("ASGD_DC_LAMBDA", "0", "ASGD_DC_LAMBDA='0' is not allowed"),
])
def test_bad_options(tmp_path, key, value, fragment):
    cfg = asgd_cfg(tmp_path / "s.cfg", **{key: value})
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 2
    assert fragment in proc.stderr



SIGNALS = str(ROOT / "benchmarks" / "signal_cnn.py")


def signal_accuracy(tmp_path, name, **keys):
    """Final validation accuracy of SignalCNN (its defaults: 8,000 noisy sinusoids, lr 0.02) after 8 epochs,
    the learning rate dropping tenfold for the last 2."""
    cfg = write_cfg(tmp_path / f"{name}.cfg", MODELFILE=SIGNALS, MODELCLASS="SignalCNN", RUN_DIR=name, N_EPOCHS=8,
                    MODEL_DECAY_EPOCH=6, **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return summary(tmp_path / name)


def test_four_async_workers_learn_as_well_as_one(tmp_path):
    """ASGD with 4 workers + 1 server against 1 worker at equal epochs, with ASGD_MOMENTUM_CORRECTION=implicit
    (the workers' momentum 0.9 -> 0.6), the default staleness handling, scale, and (since 2026-12-06) ASGD's default
    warm-up from lr/8 over 3 epochs.

    The signal CNN (lr 0.02, momentum 0.9) is on the edge of stability under asynchrony: with ASGD's defaults
    four 4-worker runs of this setting had landed 0.15-2.1 points below 1 worker, a fresh clone's suite on
    2026-12-06 more than 3 below, and benchmarks/learning_at_scale.py's study lost seeds outright (71.4 % at
    4 workers). The correction was its one candidate that held on every seed of this CNN at 4 workers (90.45-91.07
    %, docs/rules.md "ASGD at many workers"), so this test checks that asynchronous workers learn with it; the
    margin, 3 points, is the noise of one asynchronous run."""
    one = signal_accuracy(tmp_path, "one", DEVICES="cpu0")
    four = signal_accuracy(tmp_path, "four", RULE="ASGD", DEVICES="cpu0,cpu1,cpu2,cpu3",
                           ASGD_MOMENTUM_CORRECTION="implicit")
    assert four["staleness_mode"] == "scale"
    assert set(four["staleness"]) == {f"rank {r}" for r in range(4)}
    assert one["final_val_accuracy"] >= 0.9, one
    assert four["final_val_accuracy"] >= one["final_val_accuracy"] - 0.03, (one["final_val_accuracy"],
                                                                            four["final_val_accuracy"])
