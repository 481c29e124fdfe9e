"""Progress inside an epoch (theanompi.runtime.epoch_progress), on a clock the test moves: plain lines every
PROGRESS_EVERY seconds, the ETAs, and the tqdm bar on a stream. In real sessions (a log, a terminal):
tests/sessions/test_monitoring.py."""

from __future__ import annotations

import io
import logging
import time

import pytest

from theanompi.runtime.epoch_progress import BAR_ENV, EpochProgress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger="theanompi")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "theanompi"]


def test_a_line_every_so_many_seconds_not_every_step(lines):
    clock = Clock()
    progress = EpochProgress(n_epochs=2, every=10.0, clock=clock)
    progress.begin(0, total=100)
    for step in range(1, 101):
        clock.now = step * 0.25  # 25 s for the epoch: lines at 10 s and 20 s
        progress.advance(step, samples=step * 32)
    progress.end()
    said = lines()
    assert said == [
        "epoch 1/2  iteration 40/100 (40%)  128 samples/s  ETA epoch 00:00:15, session 00:00:40",
        "epoch 1/2  iteration 80/100 (80%)  128 samples/s  ETA epoch 00:00:05, session 00:00:30",
    ]


def test_the_session_eta_uses_the_epochs_already_timed(lines):
    clock = Clock()
    progress = EpochProgress(n_epochs=3, every=1.0, clock=clock)
    progress.begin(0, total=10)
    clock.now = 100.0  # epoch 1 took 100 s with its validation
    progress.end()
    progress.begin(1, total=10)
    clock.now = 105.0
    rate, epoch_left, session_left = progress.estimate(done=5, samples=160, now=clock.now)
    assert (rate, epoch_left, session_left) == (32.0, 5.0, 105.0)  # 5 s left in this one, then one of 100 s


def test_nothing_done_yet_has_no_eta():
    progress = EpochProgress(n_epochs=1, every=1.0, clock=Clock())
    progress.begin(0, total=5)
    assert "ETA epoch unknown, session unknown" in progress.line(done=0, samples=0, now=0.0)


def test_progress_every_zero_means_none_and_the_launcher_asks_for_the_bar(monkeypatch):
    monkeypatch.delenv(BAR_ENV, raising=False)
    assert EpochProgress.for_this_rank(n_epochs=3, every=0.0) is None
    assert EpochProgress.for_this_rank(n_epochs=3, every=60.0).bar_columns == 0
    monkeypatch.setenv(BAR_ENV, "120")
    assert EpochProgress.for_this_rank(n_epochs=3, every=60.0).bar_columns == 120


def test_the_bar_shows_steps_samples_and_both_etas(lines):
    clock, out = Clock(), io.StringIO()
    progress = EpochProgress(n_epochs=4, every=60.0, bar_columns=100, clock=clock, out=out)
    progress.begin(2, total=50)
    for step in range(1, 51):
        clock.now = step * 0.1
        if step == 30:
            time.sleep(0.3)  # tqdm redraws on its own clock, at most every 0.2 s
        progress.advance(step, samples=step * 64)
    progress.end()
    drawn = out.getvalue()
    assert "epoch 3/4" in drawn and "/50" in drawn
    assert "640 samples/s, session ETA 00:00:" in drawn, drawn[-500:]
    assert all(len(frame) <= 100 for frame in drawn.split("\r"))
    assert lines() == []  # a bar, no lines
    assert progress.bar is None
