"""Life signs inside an epoch, on the rank that prints the epoch lines: a progress bar on a terminal, else a plain line
every ``PROGRESS_EVERY`` seconds, so that a batch job's log shows an hours-long epoch moving.

Each shows the iterations done, samples/s and the ETA of the epoch and of the session. The ranks' stdout is never a
terminal itself (mpiexec forwards it): the launcher, whose stdout may be one, says so by giving the ranks
:data:`BAR_ENV` (its width); the bar is ``tqdm``'s. Rank 0 sees its own pace only, so samples/s is rank 0's times
the number of workers (each step of each worker takes a batch); the epoch line after it says the measured figure.

Example
-------
>>> clock = iter([0.0, 30.0, 61.0, 90.0]).__next__
>>> progress = EpochProgress(n_epochs=3, every=60.0, clock=clock)
>>> progress.begin(epoch=0, total=100)
>>> progress.advance(done=10, samples=640)     # 30 s in: no line yet
>>> print(progress.line(done=20, samples=1280, now=clock()))   # what the line 61 s in says
epoch 1/3  iteration 20/100 (20%)  21 samples/s  ETA epoch 00:04:04, session 00:14:14
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from theanompi.runtime.records import format_duration

#: set by the launcher when its stdout is a terminal: the terminal's width, for rank 0's progress bar
BAR_ENV = "THEANOMPI_PROGRESS_BAR"
#: seconds between two redraws of the bar's samples/s and session ETA
BAR_REFRESH_S = 0.5
log = logging.getLogger("theanompi")


class EpochProgress:
    """Rank 0's progress inside each epoch (see the module's docstring).

    ``every``: seconds between plain lines; ``bar_columns`` > 0 draws a bar that wide on ``out`` (default stdout)
    instead. Call :meth:`begin` before an epoch's first step, :meth:`advance` after each, :meth:`end` after its last.
    """

    def __init__(self, n_epochs: int, every: float, bar_columns: int = 0,
                 clock: Callable[[], float] = time.perf_counter, out: TextIO | None = None):
        self.n_epochs = n_epochs
        self.every = every
        self.bar_columns = bar_columns
        self.clock = clock
        self.out = out
        self.epoch = 0
        self.total = 0
        self.epoch_start = 0.0
        self.next_line = float("inf")
        self.epoch_seconds: list[float] = []  # wall seconds of the epochs begun and ended so far, validation included
        self.bar: Any = None
        self.bar_shown = 0.0

    @classmethod
    def for_this_rank(cls, n_epochs: int, every: float) -> EpochProgress | None:
        """The progress of the rank that prints: a bar where the launcher asked for one (:data:`BAR_ENV`), plain
        lines otherwise; None with ``every`` 0 (PROGRESS_EVERY=0)."""
        if not every:
            return None
        columns = os.environ.get(BAR_ENV, "")
        return cls(n_epochs, every, bar_columns=int(columns) if columns.isdigit() else 0)

    def begin(self, epoch: int, total: int) -> None:
        """Epoch ``epoch`` (0-based) of ``total`` steps starts now."""
        now = self.clock()
        if self.total and self.epoch == epoch - 1:  # the previous epoch, its validation included
            self.epoch_seconds.append(now - self.epoch_start)
        self.epoch, self.total, self.epoch_start = epoch, total, now
        self.next_line = now + self.every
        if self.bar_columns:
            from tqdm import tqdm  # noqa: PLC0415 - only a terminal's rank 0 draws a bar

            self.bar = tqdm(total=total, desc=f"epoch {epoch + 1}/{self.n_epochs}", unit="it",
                            ncols=self.bar_columns, nrows=24, file=self.out or sys.stdout, leave=False,
                            mininterval=0.2,  # nrows: the rank's pty has none, which tqdm takes for no room
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "[{elapsed}<{remaining}{postfix}]")
            self.bar.set_postfix_str("0 samples/s, session ETA unknown", refresh=False)  # its width from the start
            self.bar_shown = now

    def advance(self, done: int, samples: int) -> None:
        """``done`` steps of the epoch are done, ``samples`` samples trained in it (all workers): a line or a redraw
        when it is time (cheap otherwise: this runs after every step)."""
        if self.bar is not None:
            self._advance_bar(done, samples)
            return
        now = self.clock()
        if now >= self.next_line:
            self.next_line = now + self.every
            log.info("%s", self.line(done, samples, now))

    def _advance_bar(self, done: int, samples: int) -> None:
        now = self.clock()
        if now - self.bar_shown >= BAR_REFRESH_S:
            self.bar_shown = now
            rate, _, session_eta = self.estimate(done, samples, now)
            self.bar.set_postfix_str(f"{rate:.0f} samples/s, session ETA {format_duration(session_eta)}",
                                     refresh=False)
        self.bar.update(done - self.bar.n)

    def end(self) -> None:
        """The epoch's steps are done (its validation follows): the bar goes away."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def estimate(self, done: int, samples: int, now: float) -> tuple[float, float, float]:
        """(samples/s, seconds left in this epoch, seconds left in the session) after ``done`` steps."""
        elapsed = now - self.epoch_start
        if done <= 0 or elapsed <= 0:
            return 0.0, float("inf"), float("inf")
        epoch_left = elapsed / done * (self.total - done)
        per_epoch = sum(self.epoch_seconds) / len(self.epoch_seconds) if self.epoch_seconds else elapsed + epoch_left
        return samples / elapsed, epoch_left, epoch_left + per_epoch * (self.n_epochs - self.epoch - 1)

    def line(self, done: int, samples: int, now: float) -> str:
        """The plain progress line after ``done`` steps of the epoch."""
        rate, epoch_left, session_left = self.estimate(done, samples, now)
        return (f"epoch {self.epoch + 1}/{self.n_epochs}  iteration {done}/{self.total} "
                f"({100 * done // max(1, self.total)}%)  {rate:.0f} samples/s  "
                f"ETA epoch {format_duration(epoch_left)}, session {format_duration(session_left)}")
