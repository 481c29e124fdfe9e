"""TensorBoard events of a run's records (theanompi.session.tensorboard), read back with TensorBoard's own reader:
written by a recorder as it goes, and afterwards from an older run directory's jsonl records. In real sessions:
tests/sessions/test_monitoring.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, tensorboard_points

from theanompi.core.session_options import BSPOptions
from theanompi.session.recorder import Recorder
from theanompi.session.spec import SessionSpec
from theanompi.session.tensorboard import write_run


def spec_for(run_dir, **options) -> SessionSpec:
    return SessionSpec(rule="BSP", devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
                       options=BSPOptions(run_dir=str(run_dir), **options), model_options={"batch_size": 32})


def record_a_run(recorder: Recorder, epochs: int = 3, steps: int = 5) -> list[float]:
    """Epochs of ``steps`` iterations, batch losses 1, 2, 3, ...; returns those losses."""
    losses = []
    for epoch in range(epochs):
        for _ in range(steps):
            losses.append(float(len(losses) + 1))
            recorder.record_train(losses[-1], 0.5, 4)
            recorder.end_iteration()
        recorder.end_epoch(epoch, {"train_loss_all": 1.0 / (epoch + 1), "val_accuracy": 0.5 + 0.1 * epoch,
                                   "val_loss": 0.9, "samples_per_s": 100.0, "elapsed_s": 2.0 * (epoch + 1)})
    recorder.write_summary({"rule": "BSP", "per_worker": [{"iterations": 15}, {"iterations": 15}]}, plots=False)
    recorder.close()
    return losses


def test_a_recorder_writes_its_records_as_events(tmp_path):
    recorder = Recorder(tmp_path)
    recorder.open_board(spec_for(tmp_path, tensorboard_every=2))
    losses = record_a_run(recorder)
    scalars, texts = tensorboard_points(tmp_path / "tensorboard")
    assert scalars["val/accuracy"] == [(1, 0.5), (2, pytest.approx(0.6)), (3, pytest.approx(0.7))]
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3]
    assert {"val/loss", "speed/samples_per_s", "time/calc_s", "time/compile_s"} <= set(scalars)
    # every 2nd iteration: the mean batch loss since the previous point (it starts again with each epoch)
    points = dict(scalars["train/loss_per_iteration"])
    assert sorted(points) == [2, 4, 6, 8, 10, 12, 14]
    assert points[2] == pytest.approx(sum(losses[0:2]) / 2) and points[4] == pytest.approx(sum(losses[2:4]) / 2)
    assert points[6] == pytest.approx(losses[5])  # iteration 5 ended epoch 1: its sums restarted
    options = texts["session/options"][0]
    assert "| RULE | BSP |" in options and "| TENSORBOARD_EVERY | 2 |" in options and "| MODEL_BATCH_SIZE | 32 |" \
        in options
    assert "| rule | BSP |" in texts["session/summary"][0] and "| worker | iterations |" in texts["session/summary"][0]


def test_worker_records_go_to_their_own_run_and_tensorboard_false_writes_none(tmp_path):
    recorder = Recorder(tmp_path / "workers" / "worker-1")
    recorder.open_board(spec_for(tmp_path))
    record_a_run(recorder, epochs=2)
    scalars, _ = tensorboard_points(tmp_path / "tensorboard" / "workers" / "worker-1")
    assert [step for step, _ in scalars["val/accuracy"]] == [1, 2]
    off = Recorder(tmp_path / "off")
    off.open_board(spec_for(tmp_path / "off", tensorboard=False))
    record_a_run(off, epochs=1)
    assert off.board is None and not (tmp_path / "off" / "tensorboard").exists()
    reader = Recorder(tmp_path / "not-mine", write=False)  # a rank that writes no records writes no events
    reader.open_board(spec_for(tmp_path / "not-mine"))
    assert reader.board is None


def test_an_older_run_directory_gets_its_events_from_its_records(tmp_path):
    spec_for(tmp_path).save(tmp_path / "session.json")
    record_a_run(Recorder(tmp_path))  # no board: a run from before TENSORBOARD
    record_a_run(Recorder(tmp_path / "workers" / "worker-0"), epochs=2)
    written = write_run(tmp_path)
    assert written == [tmp_path / "tensorboard", tmp_path / "tensorboard" / "workers" / "worker-0"]
    scalars, texts = tensorboard_points(tmp_path / "tensorboard")
    assert [step for step, _ in scalars["val/accuracy"]] == [1, 2, 3]
    assert "train/loss_per_iteration" not in scalars  # not in the records
    assert "session/options" in texts and "session/summary" in texts
    with pytest.raises(ValueError, match="already has TensorBoard events"):
        write_run(tmp_path)


def test_recorder_command_writes_the_events_and_refuses_twice(tmp_path):
    record_a_run(Recorder(tmp_path))
    command = [sys.executable, "-m", "theanompi.recorder", str(tmp_path), "--tensorboard"]  # 0.1's path, kept
    first = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(tmp_path / "tensorboard")
    assert not (tmp_path / "curves.png").exists()  # events, not plots
    again = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines()[-1].startswith(f"theanompi.session.recorder: {tmp_path / 'tensorboard'}"
                                                             " already has TensorBoard events")
    empty = tmp_path / "empty"
    empty.mkdir()
    none = subprocess.run([sys.executable, "-m", "theanompi.session.recorder", str(empty), "--tensorboard"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert none.returncode == 2
    assert none.stderr.strip().splitlines()[-1] == f"theanompi.session.recorder: {empty} has no epochs.jsonl records"


def test_a_resume_keeps_the_earlier_restarts_events_up_to_its_iteration(tmp_path):
    """An elastic session's restarts (step: the iteration resumed at) survive a later restart's trimming of the
    events (issue 39's records trimmed on resume with issue 37's restart events); past the checkpoint they go."""
    from theanompi.core.no_follow import Folder
    from theanompi.session.tensorboard import trim_events

    recorder = Recorder(tmp_path)
    recorder.open_board(spec_for(tmp_path))
    assert recorder.board is not None
    recorder.board.restart({"reason": "lost", "iteration": 12, "workers_after": 2})
    recorder.board.restart({"reason": "grow", "iteration": 40, "workers_after": 3})
    record_a_run(recorder)
    with Folder.open(tmp_path) as run:
        trim_events(run, "tensorboard", last_step=2, last_iteration=30)
    scalars, texts = tensorboard_points(tmp_path / "tensorboard")
    assert scalars["elastic/workers"] == [(12, 2.0)] and len(texts["session/restart"]) == 1
    assert [step for step, _ in scalars["val/accuracy"]] == [1, 2] and "session/options" not in texts
