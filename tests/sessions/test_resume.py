"""Checkpoints and resume under a real mpiexec.
(Reading checkpoints without ranks: tests/session/test_checkpoint.py.)"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ASSETS, run_launcher, write_cfg

from theanompi.runtime.records import load_final_params
from theanompi.session.checkpoint import load_checkpoint, resolve_checkpoint

# the cosine schedule and averaged weights (the final model): both go on exactly where the checkpoint left them
SCHEDULED = dict(LR_SCHEDULE="cosine", LR_MIN=0.001, AVERAGE_WEIGHTS="ema", EMA_DECAY=0.95)


@pytest.mark.parametrize("sync_type, extra", [("cdd", {}), ("avg", {}), ("cdd", SCHEDULED)],
                         ids=["cdd", "avg", "cdd-cosine-ema"])
def test_bsp_resume_equals_uninterrupted_run(tmp_path, sync_type, extra):
    common = dict(MODEL_HIDDEN=64, BSP_SYNC_TYPE=sync_type, BSP_AVG_FREQ=3, CHECKPOINT_EVERY=2, **extra)
    # the uninterrupted run's own mid-way checkpoint (after epoch 2 of 4) is the one resumed
    mid_way = "full/checkpoints/ckpt-epoch-0001.hkl"
    full = write_cfg(tmp_path / "full.cfg", N_EPOCHS=4, RUN_DIR="full", **common)
    rest = write_cfg(tmp_path / "rest.cfg", N_EPOCHS=4, RUN_DIR="rest", RESUME=mid_way, **common)
    outputs = {}
    for name, cfg in (("full", full), ("rest", rest)):
        proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outputs[name] = proc.stdout
    assert "resumed from" in outputs["rest"] and "after epoch 2" in outputs["rest"]
    assert len([line for line in outputs["rest"].splitlines() if "] epoch " in line]) == 2
    for a, b in zip(load_final_params(tmp_path / "full"), load_final_params(tmp_path / "rest")):
        np.testing.assert_array_equal(a, b)  # same data order, same arithmetic: bit for bit
    ckpt = load_checkpoint(tmp_path / mid_way)
    assert ckpt["epoch"] == 1 and ckpt["n_workers"] == 2 and ckpt["rule"] == "BSP"
    assert len(ckpt["worker_state"][0]) == 1 + 4  # lr + one velocity per param
    if extra:  # the averages are in the checkpoint, and the final model is the average
        assert [w["seen"] for w in ckpt["worker_average"]] == [2 * ckpt["iteration"]] * 2
        rates = [[json.loads(line)["lr"] for line in (tmp_path / run / "epochs.jsonl").read_text().splitlines()]
                 for run in ("full", "rest")]
        assert rates[0][2:] == rates[1] and rates[0][-1] < rates[0][0]  # the schedule went on where it was
        assert json.loads((tmp_path / "rest" / "summary.json").read_text())["final_model"] == "ema"


def test_killed_worker_leaves_last_checkpoint_intact_and_resume_continues(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ASSETS / "contract_models.py"), MODELCLASS="Sleeper",
                    N_EPOCHS=6, CHECKPOINT_EVERY=1, MODEL_BATCH_SIZE=256, RUN_DIR="run")
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    proc = subprocess.Popen([exe, f"-cfg={cfg}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    latest = tmp_path / "run" / "checkpoints" / "latest"
    deadline = time.time() + 120
    while time.time() < deadline and not latest.exists():
        time.sleep(0.2)
    time.sleep(0.7)  # mid-way through the next epoch
    os.kill(int((tmp_path / "run" / "ranks" / "rank-1.pid").read_text()), signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    saved = load_checkpoint(tmp_path / "run" / "checkpoints")  # intact and loadable
    resumed = write_cfg(tmp_path / "r.cfg", N_EPOCHS=6, MODEL_BATCH_SIZE=256, RESUME="run/checkpoints",
                        RUN_DIR="resumed")
    proc2, _ = run_launcher(f"-cfg={resumed}", cwd=tmp_path)
    assert proc2.returncode == 0, proc2.stderr
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["epochs"] == 6 - (saved["epoch"] + 1)  # lost at most the interrupted epoch


@pytest.mark.parametrize("rule", ["ASGD", "EASGD", "GOSGD"])
def test_resume_continues_every_rule_from_its_checkpoint(tmp_path, rule):
    """... with the cosine schedule and averaged weights, which the checkpoint keeps (the servers' for EASGD and
    ASGD, each worker's share of the consensus for GOSGD) and which are the final model."""
    from theanompi.session.checkpoint import final_params

    keys = dict(RULE=rule, MODEL_HIDDEN=64, CHECKPOINT_EVERY=1, **SCHEDULED,
                DEVICES="cpu0,cpu1,cpu2" if rule == "EASGD" else "cpu0,cpu1")  # EASGD: a server and two workers
    if rule == "ASGD":  # its default warm-up (3 epochs) would outlast these 2; one over the first epoch instead
        keys["WARMUP_EPOCHS"] = 1
    first = write_cfg(tmp_path / "a.cfg", N_EPOCHS=1, RUN_DIR="a", **keys)
    assert run_launcher(f"-cfg={first}", cwd=tmp_path)[0].returncode == 0
    saved = load_checkpoint(tmp_path / "a" / "checkpoints")
    assert saved["rule"] == rule and saved["epoch"] == 0 and saved["n_workers"] == 2
    if rule == "EASGD":  # the centre, and every worker's exact snapshot
        assert saved["centre"].size == sum(p.size for p in saved["worker_params"][0])
        assert sum(saved["worker_iterations"]) == saved["iteration"] == 48
    if rule == "GOSGD":  # weights of a drained cut: they sum to 1
        assert abs(sum(w["weight"] for w in saved["worker_rule_state"]) - 1.0) < 1e-12
    n_params = sum(p.size for p in saved["worker_params"][0])
    if rule == "EASGD":  # the centre's average, kept by the server
        assert saved["average"].size == n_params and saved["average_seen"] == 48
    else:  # ASGD: the table's average (pulled from the servers); GOSGD: each worker's share of the consensus's
        assert [w["params"].size for w in saved["worker_average"]] == [n_params] * 2
        for got, want in zip(load_final_params(tmp_path / "a"), final_params(saved), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # the final model is the average
    second = write_cfg(tmp_path / "b.cfg", N_EPOCHS=2, RUN_DIR="b", RESUME="a/checkpoints", **keys)
    proc, _ = run_launcher(f"-cfg={second}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stdout
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["final_val_accuracy"] >= 0.8  # EASGD, GOSGD vary with timing: 0.85-0.95
    assert summary["final_model"] == "ema" and summary["final_ema_val_accuracy"] >= 0.8  # lags the params: 0.85-0.93
    assert resolve_checkpoint(tmp_path / "b" / "checkpoints").name == "ckpt-epoch-0001.hkl"


def _finished_checkpoint(directory, rule: str, epochs: int, hidden: int = 16) -> dict:
    """A checkpoint of ``rule`` after ``epochs`` epochs of the MLP (MODEL_HIDDEN=hidden) on 2 workers whose
    workers hold different parameters (and EASGD's centre others again), so that the final model tells them apart."""
    from theanompi.session.checkpoint import save_checkpoint

    rng = np.random.default_rng(0)
    shapes = [(64, hidden), (hidden,), (hidden, 10), (10,)]
    workers = [[rng.standard_normal(s).astype("float32") for s in shapes] for _ in range(2)]
    payload = {"rule": rule, "epoch": epochs - 1, "iteration": 10**6, "n_workers": 2, "seed": 0,
               "worker_params": workers, "worker_state": [[], []], "worker_rule_state": [{}, {}]}
    if rule == "GOSGD":
        payload["worker_rule_state"] = [{"weight": 0.25}, {"weight": 0.75}]
    if rule == "EASGD":
        payload["centre"] = rng.standard_normal(sum(int(np.prod(s)) for s in shapes)).astype("float32")
        payload["worker_iterations"] = [5 * 10**5, 5 * 10**5]
    save_checkpoint(directory, payload)
    return payload


# N_EPOCHS given: the launcher sees there is nothing to train (every rule); from the model's n_epochs: the ranks do
# (the rules whose end differs from BSP's: EASGD's server, GOSGD's consensus, ASGD's servers)
@pytest.mark.parametrize("rule, epochs_from", [("BSP", "N_EPOCHS"), ("EASGD", "N_EPOCHS"), ("GOSGD", "N_EPOCHS"),
                                               ("ASGD", "N_EPOCHS"), ("EASGD", "model"), ("GOSGD", "model"),
                                               ("ASGD", "model")])
def test_resuming_a_finished_session_writes_the_final_model_and_exits_0(tmp_path, rule, epochs_from):
    from theanompi.session.checkpoint import final_params

    payload = _finished_checkpoint(tmp_path / "ckpts", rule, epochs=2)
    epochs = {"N_EPOCHS": 2} if epochs_from == "N_EPOCHS" else {"N_EPOCHS": None, "MODEL_N_EPOCHS": 2}
    cfg = write_cfg(tmp_path / "s.cfg", RULE=rule, MODEL_HIDDEN=16, RESUME="ckpts", RUN_DIR="run", **epochs)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stdout.splitlines() if "nothing to train" in line]
    assert len(said) == 1 and "the checkpoint is at epoch 2 of 2: nothing to train" in said[0], proc.stdout
    assert ("starting" in proc.stdout) == (epochs_from == "model")  # the launcher path starts no rank
    expected = final_params(payload)
    for got, want in zip(load_final_params(tmp_path / "run"), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 0 and summary["final_params"].endswith("final_params.npz")
