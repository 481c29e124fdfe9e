"""``bytes_sent`` in summary.json and the TensorBoard events, for every rule, under real mpiexec on one machine: each
rank's count against what its rule's messages must add up to (theanompi.comm.traffic says what is counted).
Against the bytes on the wire of separate hosts: tests/sessions/test_bytes_on_the_wire.py."""

from __future__ import annotations

import json

import pytest
from conftest import run_launcher, tensorboard_points, write_cfg

from theanompi.runtime.records import load_final_params

TRAINING = dict(N_EPOCHS=2, MODEL_HIDDEN=32)


def session(tmp_path, rule: str, devices: str, **keys) -> tuple[dict, int]:
    """Run one session; returns its summary and the bytes of its parameters (float32)."""
    cfg = write_cfg(tmp_path / f"{rule}.cfg", RULE=rule, DEVICES=devices, RUN_DIR="run", **TRAINING, **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    return summary, sum(p.nbytes for p in load_final_params(tmp_path / "run"))


@pytest.mark.timeout(250)
def test_bsp_counts_one_allreduce_per_step_and_the_start_and_writes_it_per_epoch(tmp_path):
    s, n = session(tmp_path, "BSP", "cpu0,cpu1", BSP_SYNC_TYPE="cdd")
    steps = s["iterations"]
    # with 2 workers an allreduce sends the buffer once; worker 0 also broadcast the start
    assert s["bytes_sent"] == [steps * n + n, steps * n]
    assert [w["bytes_sent"] for w in s["per_worker"]] == s["bytes_sent"]
    scalars, _ = tensorboard_points(tmp_path / "run" / "tensorboard")
    per_epoch = scalars["comm/bytes_sent"]
    assert [step for step, _ in per_epoch] == [1, 2]
    assert sum(value for _, value in per_epoch) == pytest.approx(sum(s["bytes_sent"]), rel=1e-6)
    epochs = [json.loads(line) for line in (tmp_path / "run" / "epochs.jsonl").read_text().splitlines()]
    assert sum(e["bytes_sent"] for e in epochs) == sum(s["bytes_sent"])


@pytest.mark.timeout(250)
@pytest.mark.parametrize("average_weights, copies", [("none", 1), ("ema", 2)])
def test_gosgd_counts_its_pushes_the_start_and_the_consensus(tmp_path, average_weights, copies):
    """A push carries the params (and with AVERAGE_WEIGHTS=ema their average: twice as long) and the weight; the
    start sends the params alone; the consensus sums what gossips in float64, and the weight."""
    s, n = session(tmp_path, "GOSGD", "cpu0,cpu1,cpu2", GOSGD_P=0.5, AVERAGE_WEIGHTS=average_weights)
    gossiped = copies * n  # bytes of what a message carries besides the weight (float32)
    workers, consensus = 3, gossiped // 4 * 8 + 8
    for rank, sent in enumerate(s["bytes_sent"]):
        expected = s["pushes"][rank] * (gossiped + 8)  # the float64 weight in 2 float32 slots
        expected += (workers - 1) * (n + consensus) if rank == 0 else consensus  # start, reduce, broadcast
        assert sent == expected, (rank, s["bytes_sent"], s["pushes"])


@pytest.mark.timeout(250)
def test_easgd_counts_the_servers_replies_and_the_workers_reports(tmp_path):
    s, n = session(tmp_path, "EASGD", "cpu0,cpu1,cpu2", EASGD_TAU=2)
    server, *workers = s["bytes_sent"]
    assert server == sum(s["exchanges"]) * (16 + n)  # each answer: the reply (2 int64) and d
    for k, sent in enumerate(workers):  # each exchange: the report (7 float64) and w; worker 0 the start
        at_least = s["exchanges"][k] * (56 + n) + (2 * n if k == 0 else 0)
        assert at_least <= sent <= at_least + 4 * n, (k, workers)  # + the optimizer-state snapshot it left
    assert [w["bytes_sent"] for w in s["per_worker"]] == workers


@pytest.mark.timeout(250)
def test_asgd_lists_the_workers_then_the_servers(tmp_path):
    s, n = session(tmp_path, "ASGD", "cpu0,cpu1", ASGD_SERVERS=2)
    assert len(s["bytes_sent"]) == 4 and min(s["bytes_sent"]) > 0
    for k in (0, 1):  # each exchange pushes a delta (the servers' shards, each with a header) and asks for values
        assert s["bytes_sent"][k] >= s["per_worker"][k]["exchanges"] * n
    assert sum(s["bytes_sent"][2:]) >= (s["per_worker"][0]["exchanges"] + s["per_worker"][1]["exchanges"]) * n
