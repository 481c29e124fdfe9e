"""Elastic sessions under a real mpiexec: a worker killed with SIGKILL, a discovery script that shrinks then grows,
a restart loop that gives up, and a different number of workers on resume, for every rule.

(The pieces without mpiexec: tests/launch/test_discovery.py, test_losses.py, test_resume_plan.py, test_elastic_loop.py.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import ASSETS, run_launcher, tensorboard_points, write_cfg

sys.path.insert(0, str(ASSETS))
from elastic_models import read_steps

TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")
STEP_LOG = dict(MODELFILE=str(ASSETS / "elastic_models.py"), MODELCLASS="StepLog")
N_TRAIN = 1500  # the digits' training set: global batches of 50, 60 and 75 divide it, so no epoch pads its last batch


def launch(cfg: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([TMLAUNCHER, f"-cfg={cfg}"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until ``path`` exists (the session still running)."""
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def kill_rank(run_dir: Path, rank: int) -> None:
    os.kill(int((run_dir / "ranks" / f"rank-{rank}.pid").read_text()), signal.SIGKILL)


def final_history(run_dir: Path) -> list[dict]:
    """The steps that count: for every iteration, the rows of the last session that trained it (a restart trains
    again what followed its checkpoint)."""
    by_iteration: dict[int, dict[int, list[dict]]] = {}
    for row in read_steps(run_dir):
        by_iteration.setdefault(row["iteration"], {}).setdefault(row["session"], []).append(row)
    rows = []
    for iteration in sorted(by_iteration):
        sessions = by_iteration[iteration]
        rows += sessions[max(sessions, key=lambda s: max(r["time"] for r in sessions[s]))]
    return rows


def assert_every_sample_once_per_epoch(run_dir: Path, n_epochs: int) -> None:
    """Counted by sample id: every epoch's steps saw every training sample exactly once, restarts or not."""
    rows = final_history(run_dir)
    iterations = sorted({r["iteration"] for r in rows})
    assert iterations == list(range(len(iterations))), "an iteration is missing"
    for epoch in range(n_epochs):
        seen = Counter(i for r in rows if r["epoch"] == epoch for i in r["ids"])
        assert len(seen) == N_TRAIN and set(seen.values()) == {1}, (epoch, len(seen), Counter(seen.values()))


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_bsp_killed_worker_restarts_smaller_then_grows_back_without_losing_a_sample(tmp_path):
    """kill -9 of one of 3 workers: the session restarts from its newest checkpoint (inside an epoch) with the 2
    left, the killed worker's device comes back after ELASTIC_COOLDOWN and the session grows to 3 again at its next
    checkpoint; every epoch still sees every sample exactly once; summary.json and TensorBoard record both."""
    run = tmp_path / "run"
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES="cpu0,cpu1,cpu2", N_EPOCHS=4, RUN_DIR="run", MODEL_NAP=0.08,
                    MODEL_BATCH_SIZE=20,  # a global batch of 60: 2 workers then take 30 each
                    CHECKPOINT_EVERY_ITERS=4, MAX_RESTARTS=1, MIN_WORKERS=2, ELASTIC_COOLDOWN=3, **STEP_LOG)
    proc = launch(cfg, tmp_path)
    wait_for(run / "checkpoints" / "latest", proc)
    kill_rank(run, 1)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = [line for line in out.splitlines() if line.startswith(("tmlauncher: restart", "tmlauncher: growing"))]
    assert lines[0].startswith("tmlauncher: restart 1 of MAX_RESTARTS=1: rank 1 (worker on cpu1) died"), out
    assert "with 2 workers (was 3): cpu0,cpu2" in lines[0], lines
    restarts = summary(run)["restarts"]
    assert [(r["reason"], r["workers_before"], r["workers_after"]) for r in restarts] == \
        [("lost", 3, 2), ("grow", 2, 3)], restarts
    assert restarts[0]["lost_ranks"] == [1] and restarts[0]["checkpoint"].endswith(".hkl")
    assert any(line.startswith("tmlauncher: growing: ") for line in out.splitlines()), out
    assert summary(run)["workers"] == 3 and summary(run)["final_val_accuracy"] >= 0.9
    assert_every_sample_once_per_epoch(run, 4)
    scalars, texts = tensorboard_points(run / "tensorboard")
    assert [value for _, value in scalars["elastic/workers"]] == [2.0, 3.0]
    assert len(texts["session/restart"]) == 2
    assert [json.loads(line)["reason"] for line in (run / "restarts.jsonl").read_text().splitlines()] == \
        ["lost", "grow"]


# every other rule: kill -9 of one of 3 workers, the session restarts with the 2 left and ends well
@pytest.mark.parametrize("rule, keys", [
    ("EASGD", {"DEVICES": "cpu0,cpu1,cpu2,cpu3", "EASGD_TAU": 2}),  # a server and 3 workers
    ("GOSGD", {"DEVICES": "cpu0,cpu1,cpu2", "GOSGD_P": 0.5}),
    ("ASGD", {"DEVICES": "cpu0,cpu1,cpu2", "ASGD_SERVERS": 2, "ASGD_UPDATER": "momentum"}),
])
def test_every_rule_restarts_after_a_killed_worker(tmp_path, rule, keys):
    run = tmp_path / "run"
    cfg = write_cfg(tmp_path / "s.cfg", RULE=rule, N_EPOCHS=3, RUN_DIR="run", MODEL_NAP=0.05, MODEL_BATCH_SIZE=25,
                    CHECKPOINT_EVERY_ITERS=6, MAX_RESTARTS=1, MIN_WORKERS=2, **STEP_LOG, **keys)
    proc = launch(cfg, tmp_path)
    wait_for(run / "checkpoints" / "latest", proc)
    kill_rank(run, 2)  # EASGD: its worker 1 (the server is rank 0); the others: worker 2
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    (restart,) = summary(run)["restarts"]
    assert (restart["reason"], restart["workers_before"], restart["workers_after"], restart["lost_ranks"]) == \
        ("lost", 3, 2, [2]), restart
    assert restart["checkpoint"] is not None and f"resumed from {restart['checkpoint']}" in out, out
    result = summary(run)
    assert result["workers"] == 2 and result["final_val_accuracy"] >= 0.85, result
    if rule == "EASGD":  # beta = workers x alpha kept: 3 x 0.5 = 2 x 0.75
        assert result["alpha"] == 0.75 and "alpha 0.75 keeps beta = workers x alpha = 1.5" in out, out
    if rule == "GOSGD":  # the weights renormalised over the 2 workers left
        assert abs(result["sum_weights"] - 1.0) < 1e-9 and "weights of 2 workers renormalised" in out, out
    if rule == "ASGD":  # the table and the servers' momentum back on the servers, bit for bit
        assert "restored onto 2 server(s), bit for bit" in out, out


@pytest.mark.parametrize("case", ["MAX_RESTARTS", "MIN_WORKERS"])
def test_a_restart_loop_gives_up_with_one_line(tmp_path, case):
    """MAX_RESTARTS used up, or fewer than MIN_WORKERS workers after ELASTIC_WAIT: one line, a non-zero exit."""
    run = tmp_path / "run"
    keys = (dict(DEVICES="cpu0,cpu1,cpu2", MAX_RESTARTS=1, MIN_WORKERS=1) if case == "MAX_RESTARTS" else
            dict(DEVICES="cpu0,cpu1", MAX_RESTARTS=3, ELASTIC_WAIT=2, ELASTIC_COOLDOWN=600))
    cfg = write_cfg(tmp_path / "s.cfg", N_EPOCHS=50, RUN_DIR="run", MODEL_NAP=0.05, CHECKPOINT_EVERY_ITERS=10,
                    **STEP_LOG, **keys)
    proc = launch(cfg, tmp_path)
    wait_for(run / "checkpoints" / "latest", proc)
    kill_rank(run, 1)
    if case == "MAX_RESTARTS":  # the restarted session loses a worker again
        wait_for(run / "restarts.jsonl", proc)
        (run / "checkpoints" / "latest").unlink()
        wait_for(run / "checkpoints" / "latest", proc)
        kill_rank(run, 1)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 137, err
    ours = [line for line in err.splitlines() if line.startswith("tmlauncher")]
    assert len(ours) == 1, err
    if case == "MAX_RESTARTS":
        assert ours[0].startswith("tmlauncher: session failed: rank 1 (worker on cpu2) died (mpiexec exit code 137); "
                                  "gave up: MAX_RESTARTS=1 restart(s) used"), ours
    else:
        assert ours[0].startswith("tmlauncher: session failed: rank 1 (worker on cpu1) died (mpiexec exit code 137); "
                                  "gave up: 1 worker(s) available after waiting 2 s (ELASTIC_WAIT), fewer than "
                                  "MIN_WORKERS=2; left out: cpu1 ("), ours


def test_a_discovery_script_that_shrinks_then_grows(tmp_path):
    """HOST_DISCOVERY offers 3 slots, then 2 (a worker taken away with notice), then 3 again: the session stops at
    a checkpoint and restarts each time, without losing or repeating a sample."""
    run, hosts = tmp_path / "run", tmp_path / "hosts.txt"
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    here = socket.gethostname()
    hosts.write_text(f"{here}:3\n")
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES=None, HOST_DISCOVERY="discover.sh", N_EPOCHS=4, RUN_DIR="run",
                    MODEL_NAP=0.08, MODEL_BATCH_SIZE=20, CHECKPOINT_EVERY_ITERS=4, MIN_WORKERS=2, **STEP_LOG)
    proc = launch(cfg, tmp_path)
    wait_for(run / "checkpoints" / "latest", proc)
    hosts.write_text(f"# one slot is going away\n{here}:2\n")
    wait_for(run / "restarts.jsonl", proc)
    hosts.write_text(f"{here}:3\n")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == f"tmlauncher: devices from HOST_DISCOVERY=discover.sh: {here}:cpu0,cpu1,cpu2", out
    restarts = summary(run)["restarts"]
    assert [(r["reason"], r["workers_before"], r["workers_after"]) for r in restarts] == \
        [("shrink", 3, 2), ("grow", 2, 3)], restarts
    assert restarts[0]["failure"] == f"HOST_DISCOVERY=discover.sh no longer offers {here}:cpu2", restarts
    assert summary(run)["final_val_accuracy"] >= 0.9
    assert_every_sample_once_per_epoch(run, 4)


def step_losses(run_dir: Path) -> dict[int, float]:
    """iteration -> the mean loss of that step over every worker's batch."""
    sums: dict[int, list[float]] = {}
    for row in final_history(run_dir):
        total = sums.setdefault(row["iteration"], [0.0, 0.0])
        total[0] += row["loss_sum"]
        total[1] += row["n"]
    return {i: loss / n for i, (loss, n) in sums.items()}


@pytest.mark.parametrize("before, after", [(3, 2), (2, 3)])
def test_bsp_resumed_at_another_number_of_workers_steps_as_the_uninterrupted_run(tmp_path, before, after):
    """A checkpoint taken inside an epoch by ``before`` workers, resumed by ``after``: every worker starts from the
    consensus, the global batch is kept (LR_SCALING=none) and the data continue at the same sample, so each step's
    loss is the uninterrupted run's (within 1 %; only the order of the sums differs)."""
    keys = dict(N_EPOCHS=1, MODEL_BATCH_SIZE=60 // before, CHECKPOINT_EVERY_ITERS=12, **STEP_LOG)
    devices = {n: ",".join(f"cpu{i}" for i in range(n)) for n in (before, after)}
    full = write_cfg(tmp_path / "full.cfg", DEVICES=devices[before], RUN_DIR="full", **keys)
    proc, _ = run_launcher(f"-cfg={full}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    checkpoint = "full/checkpoints/ckpt-epoch-0000-at-000000720.hkl"  # after 12 steps of 60 samples
    rest = write_cfg(tmp_path / "rest.cfg", DEVICES=devices[after], RUN_DIR="rest", RESUME=checkpoint, **keys)
    proc, _ = run_launcher(f"-cfg={rest}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"MODEL_BATCH_SIZE={60 // after}: the checkpoint global batch of 60 over {after} workers" in proc.stdout
    assert "at sample 720 of epoch 1" in proc.stdout, proc.stdout
    uninterrupted, resumed = step_losses(tmp_path / "full"), step_losses(tmp_path / "rest")
    assert sorted(resumed) == list(range(12, 25))
    for iteration in sorted(resumed):
        assert resumed[iteration] == pytest.approx(uninterrupted[iteration], rel=0.01), iteration
    # the 13 steps after the checkpoint cover the rest of the epoch's samples, once each
    ids = Counter(i for r in final_history(tmp_path / "rest") for i in r["ids"])
    first = {i for r in final_history(tmp_path / "full") if r["iteration"] < 12 for i in r["ids"]}
    assert set(ids.values()) == {1} and len(ids) == N_TRAIN - 720 and not first & set(ids)


def test_asgd_resumed_on_another_number_of_servers_and_workers_gets_the_table_bit_for_bit(tmp_path):
    """The table saved by 2 servers (its momentum state too), resumed on 1 server by 3 workers: worker 0 reads it
    back from the server and checks it bit for bit (the session fails otherwise)."""
    keys = dict(RULE="ASGD", N_EPOCHS=1, ASGD_UPDATER="momentum", CHECKPOINT_EVERY_ITERS=10, WARMUP_EPOCHS=0,
                **STEP_LOG)  # no warm-up: ASGD's default one (3 epochs) would still be ramping when 1 epoch ends
    first = write_cfg(tmp_path / "a.cfg", DEVICES="cpu0,cpu1", ASGD_SERVERS=2, RUN_DIR="a", **keys)
    proc, _ = run_launcher(f"-cfg={first}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    resumed = write_cfg(tmp_path / "b.cfg", DEVICES="cpu0,cpu1,cpu2", ASGD_SERVERS=1, RUN_DIR="b",
                        RESUME="a/checkpoints/ckpt-epoch-0000-at-000000640.hkl", **keys)  # after 10 steps of 2 x 32
    proc, _ = run_launcher(f"-cfg={resumed}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("the checkpoint's table (256 virtual partitions) and its velocity restored onto 1 server(s), bit for bit"
            in proc.stdout), proc.stdout
    assert summary(tmp_path / "b")["final_val_accuracy"] >= 0.8
