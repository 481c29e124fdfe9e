"""Watching a session: its TensorBoard events, read with TensorBoard's own reader (a validation-accuracy point per
epoch, the training loss every TENSORBOARD_EVERY iterations, the options; EASGD's workers as runs of their own), and
rank 0's progress inside an epoch: plain lines every PROGRESS_EVERY seconds in a log, a bar on a terminal.
(Units: tests/session/test_tensorboard.py, tests/runtime/test_epoch_progress.py.)"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import ASSETS, ROOT, run_launcher, tensorboard_points, write_cfg

NAPPER = {"MODELFILE": str(ASSETS / "contract_models.py"), "MODELCLASS": "Napper"}  # 0.1 s a step: 24 per epoch
PROGRESS_LINE = re.compile(r"^\[rank 0\] epoch (\d)/2  iteration (\d+)/24 \(\d+%\)  \d+ samples/s  "
                           r"ETA epoch \d\d:\d\d:\d\d, session \d\d:\d\d:\d\d$")


def epochs_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]


def test_a_logged_session_shows_progress_lines_and_writes_tensorboard_events(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", PROGRESS_EVERY=0.5, TENSORBOARD_EVERY=5, **NAPPER)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)  # stdout is a pipe, as in a batch job's log
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    progress = [PROGRESS_LINE.match(line) for line in lines if " iteration " in line]
    assert all(progress) and len(progress) >= 4, proc.stdout  # ~2.4 s an epoch: a line every 0.5 s
    assert {m.group(1) for m in progress} == {"1", "2"}
    first_epoch_line = next(i for i, line in enumerate(lines) if "epoch 1/2  train loss" in line)
    assert any(" iteration " in line for line in lines[:first_epoch_line])  # life signs before the epoch ended
    assert "\r" not in proc.stdout  # no bar in a log

    scalars, texts = tensorboard_points(tmp_path / "run" / "tensorboard")
    epochs = epochs_of(tmp_path / "run")
    assert [step for step, _ in scalars["val/accuracy"]] == [1, 2]
    assert [value for _, value in scalars["val/accuracy"]] == pytest.approx([e["val_accuracy"] for e in epochs])
    assert [step for step, _ in scalars["train/loss_per_iteration"]] == list(range(5, 49, 5))
    assert {"train/loss", "train/error", "val/loss", "val/error", "speed/samples_per_s", "time/calc_s",
            "time/comm_s", "time/wait_s"} <= set(scalars)
    assert "| PROGRESS_EVERY | 0.5 |" in texts["session/options"][0]
    assert "| final_val_accuracy |" in texts["session/summary"][0]


def test_easgd_keeps_its_workers_records_as_runs_of_their_own(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="EASGD", RUN_DIR="run", EASGD_TAU=2, PROGRESS_EVERY=0.5,
                    DEVICES="cpu0,cpu1,cpu2", **NAPPER)  # the first device is the server's
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the server (rank 0) counts the steps its workers report through each global epoch of 2 x 24 steps
    assert re.search(r"^\[rank 0\] epoch 1/2  iteration \d+/48 ", proc.stdout, re.M), proc.stdout
    board = tmp_path / "run" / "tensorboard"
    centre, _ = tensorboard_points(board)  # the server validates the centre once per global epoch
    assert [step for step, _ in centre["val/accuracy"]] == [1, 2]
    for worker in (0, 1):
        scalars, texts = tensorboard_points(board / "workers" / f"worker-{worker}")
        shard_epochs = epochs_of(tmp_path / "run" / "workers" / f"worker-{worker}")
        assert [step for step, _ in scalars["train/loss"]] == [e["epoch"] + 1 for e in shard_epochs]
        assert "time/comm_s" in scalars and "session/options" in texts


def test_a_terminal_gets_a_progress_bar(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", **NAPPER)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))  # rows, columns
    os.set_blocking(controller, False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "tmlauncher"), f"-cfg={cfg}"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.PIPE, env=env)
    os.close(terminal)
    shown = b""
    deadline = time.time() + 240
    try:
        while proc.poll() is None and time.time() < deadline:
            try:
                shown += os.read(controller, 65536)
            except BlockingIOError:
                time.sleep(0.05)
            except OSError:  # the terminal closed
                break
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    text = shown.decode(errors="replace")
    frames = text.split("\r")
    bar = [f for f in frames if f.startswith("epoch 1/2 ") and "%|" in f]
    assert len(bar) >= 3, text[-2000:]  # drawn as it moves, not once at the end
    assert all(len(f.rstrip()) <= 110 for f in bar)  # as wide as the launcher's terminal
    assert any(re.search(r"\| 1\d/24 \[.*\d+ samples/s, session ETA \d\d:\d\d:\d\d\]", f) for f in bar), bar
    assert "epoch 1/2  train loss" in text and " iteration " not in text  # the epoch lines stay, no plain lines
