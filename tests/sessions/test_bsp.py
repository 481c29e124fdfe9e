"""BSP under a real mpiexec: equivalence, averaging, learning, failures."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ASSETS, ROOT, run_launcher, run_mpi, run_rule_init, write_cfg

from theanompi.runtime.records import load_final_params


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_cdd_two_workers_equal_one_process_with_double_batch(tmp_path):
    """2 workers x batch 32 == 1 worker x batch 64, momentum on, 2 epochs (94 steps); and not vacuously: 1 worker
    with the per-worker batch (32) ends elsewhere."""
    # AVERAGE_WEIGHTS=none: the final model must be the trained weights (an N-worker step folds N
    # batches into an average at once, a step of one process one)
    common = dict(N_EPOCHS=2, MODEL_MOMENTUM=0.9, MODEL_WEIGHT_DECAY=0.0001, MODEL_HIDDEN=64, BSP_SYNC_TYPE="cdd",
                  AVERAGE_WEIGHTS="none")
    two = write_cfg(tmp_path / "two.cfg", DEVICES="cpu0,cpu1", MODEL_BATCH_SIZE=32, RUN_DIR="two", **common)
    one = write_cfg(tmp_path / "one.cfg", DEVICES="cpu0", MODEL_BATCH_SIZE=64, RUN_DIR="one", **common)
    single = write_cfg(tmp_path / "single.cfg", DEVICES="cpu0", MODEL_BATCH_SIZE=32, RUN_DIR="single", **common)
    for cfg in (two, one, single):
        proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    p_two, p_one = load_final_params(tmp_path / "two"), load_final_params(tmp_path / "one")
    assert summary(tmp_path / "two")["iterations"] == summary(tmp_path / "one")["iterations"] == 48
    initial_gap = 0.0
    for a, b in zip(p_two, p_one):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)
        initial_gap = max(initial_gap, float(np.abs(a).max()))
    assert initial_gap > 0
    gaps = [np.abs(a - b).max() for a, b in zip(p_two, load_final_params(tmp_path / "single"))]
    assert max(gaps) > 1e-3
    assert not list((tmp_path / "two").glob("*.png"))  # write_cfg's PLOTS=false (the default draws them)


@pytest.mark.parametrize("k", [1, 3])
def test_avg_equals_numpy_mean_of_worker_params(k):
    assert "bsp avg ok" in run_mpi("check_bsp_avg.py", 2, str(k)).stdout


def test_default_session_learns_digits_via_tmlauncher(tmp_path):
    proc, _ = run_launcher(f"-cfg={ROOT / 'launch_session.cfg'}", "--set", "RUN_DIR=default", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    epochs = [line for line in proc.stdout.splitlines() if "] epoch " in line]
    assert len(epochs) == 20 and "samples/s" in epochs[0] and "ETA" in epochs[0]
    assert "final validation accuracy" in proc.stdout
    result = summary(tmp_path / "default")
    assert result["final_val_accuracy"] >= 0.95
    assert result["workers"] == 2
    for plot in ("curves.png", "breakdown.png"):
        assert (tmp_path / "default" / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = (tmp_path / "default" / "iterations.jsonl").read_text().splitlines()
    assert set(json.loads(records[-1])) == {"iteration", "calc", "comm", "wait"}


def test_avg_session_learns_via_rule_init_and_wait(tmp_path):
    run_rule_init(tmp_path, "BSP", devices=['cpu0', 'cpu1'], modelfile='theanompi.models.mlp', modelclass='MLP',
                  sync_type='avg', avg_freq=2, n_epochs=15, run_dir='avg', model_options={'batch_size': 32})
    assert summary(tmp_path / "avg")["final_val_accuracy"] >= 0.95


# a worker raising mid-epoch and the instance contract errors: tests/sessions/test_bad_input_matrix.py


def _descendants(pid):
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,pgid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "theanompi.rules.rank_main" in line and str(pid) in line]


def test_ctrl_c_ends_every_rank(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ASSETS / "contract_models.py"), MODELCLASS="Sleeper",
                    N_EPOCHS=50, RUN_DIR="sleepy")
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    # a foreground launcher in a terminal: SIGINT not ignored, even when this suite runs as a background job
    # of a non-interactive shell (which starts it, and so every child, with SIGINT ignored)
    proc = subprocess.Popen([exe, f"-cfg={cfg}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "sleepy" / "iterations.jsonl").exists():
        time.sleep(0.5)
    time.sleep(2)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "interrupted" in err
    time.sleep(1)
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path / "sleepy")], capture_output=True, text=True).stdout
    assert leftovers.strip() == "", f"orphan ranks: {leftovers}"


def test_from_scratch_example_model_learns(tmp_path):
    cfg = ROOT / "examples" / "softmax.cfg"
    proc, _ = run_launcher(f"-cfg={cfg}", "--set", f"RUN_DIR={tmp_path / 'softmax'}", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert summary(tmp_path / "softmax")["final_val_accuracy"] >= 0.90


def test_killed_launcher_takes_its_ranks_along(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ASSETS / "contract_models.py"), MODELCLASS="Sleeper",
                    N_EPOCHS=50, RUN_DIR="orphans")
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    proc = subprocess.Popen([exe, f"-cfg={cfg}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "orphans" / "iterations.jsonl").exists():
        time.sleep(0.5)
    proc.kill()  # SIGKILL: no handler runs in the launcher
    proc.wait()
    for _ in range(40):
        left = subprocess.run(["pgrep", "-f", str(tmp_path / "orphans")], capture_output=True, text=True).stdout
        if not left.strip():
            break
        time.sleep(0.5)
    assert left.strip() == "", f"orphan ranks: {left}"
