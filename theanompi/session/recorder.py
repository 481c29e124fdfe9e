"""Recorder: per-iteration calc/comm/wait seconds, the compile phase, and per-epoch metrics, as JSON lines.

Iteration records are buffered and written at each epoch end. Timers nest: time spent in an inner
timer (e.g. 'wait' for data inside the model's step) is not counted again in the enclosing one ('calc').
Rank 0 writes ``iterations.jsonl``, ``epochs.jsonl`` and ``summary.json`` into
the run directory; other ranks only keep their local sums.

Compiling is a phase of its own, kept out of calc/comm/wait: the seconds spent
building the model (handed over with :meth:`Recorder.record_phase`) and the
recorder's first iteration, whose timers hold pytensor's first call of the step
(and the peers' own warm-up). Each epoch record says ``compile_s`` (the compile
seconds since the previous record) and ``elapsed_no_compile_s`` (wall seconds
since the recorder started, compile excluded: the time axis of the plots);
``summary.json`` gets the session's ``compile_s``.

Example
-------
>>> rec = Recorder(run_dir=None)
>>> with rec.timer("calc"):
...     rec.record_train(loss=0.5, error=0.25, n=4)
>>> it = rec.end_iteration()
>>> sorted(it)
['calc', 'comm', 'iteration', 'wait']
>>> rec.train_means()
(0.5, 0.25)
>>> rec.record_phase("compile", 2.5)              # e.g. the model's build, before the recorder existed
>>> record = rec.end_epoch(0, {})
>>> record["compile_s"] >= 2.5, record["calc_s"]  # the first iteration was the warm-up
(True, 0.0)

Theano-MPI's spelling (models written for Theano-MPI call these):

>>> rec.start(); rec.end("wait"); rec.start(); rec.end("calc")
>>> rec.train_error(0, 0.25, 0.5); rec.val_error(0, 1.0, 0.5, 0.125)
>>> rec.val_sums(), rec.val_top5_sums()
([1.0, 0.5, 1], [0.125, 1])
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theanompi.core.no_follow import Folder
from theanompi.core.safe_io import append_lines, atomic_write_text
from theanompi.session.plots import plot_run
from theanompi.session.tensorboard import Board, open_board, write_run
from theanompi.session.watchdog import ACTIVITY

if TYPE_CHECKING:
    from theanompi.session.spec import SessionSpec

TIMERS = ("calc", "comm", "wait")
#: one-off phases, recorded apart from the per-iteration timers
PHASES = ("compile",)
log = logging.getLogger(__name__)


class Recorder:
    """One rank's timings and metrics; see the module's docstring.

    Parameters
    ----------
    run_dir : Path or None
        Where the records go (None: keep them in memory only).
    write : bool
        Whether this rank writes the files (rank 0 does).
    warmup_iterations : int
        The first iterations recorded as the 'compile' phase instead of calc/comm/wait; with any, the
        first validation call (:meth:`first_validation_call`) is compile too (0: neither).
    root : Path or None
        The session's RUN_DIR when ``run_dir`` lies below it (EASGD's ``RUN_DIR/workers/worker-K``): the files
        are reached from it without following a link (default: ``run_dir`` itself).
    """

    def __init__(self, run_dir: Path | None, write: bool = True, warmup_iterations: int = 1,
                 root: Path | None = None):
        self.run_dir = Path(run_dir) if run_dir else None
        self.root = Path(root) if root else self.run_dir
        self.write = write and self.run_dir is not None
        self.warmup_iterations = warmup_iterations
        self.validation_warmed_up = warmup_iterations == 0  # the first val_iter call compiles and loads too
        self._clock_start = time.perf_counter()
        self._clock_excluded = 0.0  # phase seconds spent since the clock started
        self._epoch_phases = {k: 0.0 for k in PHASES}
        self._stack: list[list[float]] = []  # [start, time of nested timers]
        self._iter = {k: 0.0 for k in TIMERS}
        self._epoch_times = {k: 0.0 for k in TIMERS}
        self.totals = {k: 0.0 for k in TIMERS + PHASES}  # whole-session seconds per timer and phase
        self._train = [0.0, 0.0, 0]  # loss*n, error*n, n
        self._val = [0.0, 0.0, 0]
        self._val_top5 = [0.0, 0]  # top-5 error*n, n (Theano-MPI's val_error)
        #: samples one Theano-MPI ``train_error``/``val_error`` call stands for (the model's batch size)
        self.samples_per_record = 1
        self._started: list[list[float]] = []  # frames opened by Theano-MPI's start()
        self.iteration = 0
        self.epochs: list[dict[str, Any]] = []
        self._pending: list[tuple] = []  # iteration records not yet written
        self._timers = {k: _Timer(self, k) for k in TIMERS}
        self._open_kinds: list[str] = []  # kinds of the timers now open, innermost last
        #: the same records as TensorBoard events, once :meth:`open_board` gave it one
        self.board: Board | None = None
        if self.write:
            if self.root == self.run_dir:
                self._files_dir.mkdir(parents=True, exist_ok=True)
            Folder.open(self._root, self._files_dir.relative_to(self._root), create=True, label="RUN_DIR").close()

    @property
    def _files_dir(self) -> Path:
        """``run_dir``, where a writing recorder's files go (``write`` is only true with one)."""
        assert self.run_dir is not None
        return self.run_dir

    @property
    def _root(self) -> Path:
        assert self.root is not None
        return self.root

    def _append(self, name: str, lines: list[str]) -> None:
        """Append ``lines`` to the records file ``name`` (never through a link: UnexpectedEntry)."""
        append_lines(self._files_dir / name, lines, root=self._root, label="RUN_DIR")

    def open_board(self, spec: SessionSpec) -> None:
        """Write these records as TensorBoard events too, the session's options first (a recorder that writes its
        records, with TENSORBOARD=true: :mod:`theanompi.session.tensorboard`)."""
        if self.write:
            self.board = open_board(spec, self._files_dir)

    def timer(self, kind: str) -> _Timer:
        """Context manager adding the block's wall time (minus nested timers) to ``kind``."""
        try:
            return self._timers[kind]
        except KeyError:
            raise ValueError(f"timer kind {kind!r} is not one of {TIMERS}") from None

    def record_train(self, loss: float, error: float, n: int) -> None:
        """Mean loss and error rate of one training batch of ``n`` samples."""
        self._train[0] += float(loss) * n
        self._train[1] += float(error) * n
        self._train[2] += int(n)

    def record_val(self, loss: float, error: float, n: int) -> None:
        """Mean loss and error rate of one validation batch of ``n`` samples."""
        self._val[0] += float(loss) * n
        self._val[1] += float(error) * n
        self._val[2] += int(n)

    # ----- Theano-MPI's spelling ---------------------------------------------------------
    def start(self) -> None:
        """Start timing a block; :meth:`end` names its kind (Theano-MPI's recorder)."""
        frame = [time.perf_counter(), 0.0]
        self._started.append(frame)
        self._stack.append(frame)

    def end(self, mode: str) -> None:
        """End the block :meth:`start` opened and add it to ``mode``: 'calc', 'comm', 'wait' (or
        Theano-MPI's 'sync', counted as 'wait')."""
        kind = "wait" if mode == "sync" else mode
        if kind not in TIMERS:
            raise ValueError(f"recorder.end({mode!r}): use one of 'calc', 'comm', 'wait', 'sync'")
        if not self._started:
            raise RuntimeError(f"recorder.end({mode!r}) without a matching recorder.start()")
        frame = self._started.pop()
        self._stack.remove(frame)
        elapsed = time.perf_counter() - frame[0]
        self._iter[kind] += elapsed - frame[1]
        if self._stack:
            self._stack[-1][1] += elapsed

    def train_error(self, count: int, cost: float, error: float) -> None:
        """Theano-MPI's ``record_train``: one batch's mean cost and error (``count`` is not used)."""
        self.record_train(cost, error, self.samples_per_record)

    def val_error(self, count: int, cost: float, error: float, error_top5: float | None = None) -> None:
        """Theano-MPI's ``record_val``, with the batch's top-5 error when given."""
        self.record_val(cost, error, self.samples_per_record)
        if error_top5 is not None:
            self._val_top5[0] += float(error_top5) * self.samples_per_record
            self._val_top5[1] += self.samples_per_record

    def val_top5_sums(self) -> list[float]:
        """[top-5 error*n, n] of this rank's validation since the last epoch end (Theano-MPI models)."""
        return list(self._val_top5)

    def record_phase(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` spent before this recorder started (e.g. building the model) to ``phase``."""
        self._add_phase(phase, seconds)

    def first_validation_call(self, seconds: float) -> None:
        """The session's first validation call took ``seconds``: count it as compile (pytensor builds the
        function's thunks on the first call), off the clock of the curves; later calls are ignored here."""
        if not self.validation_warmed_up:
            self.validation_warmed_up = True
            self._add_phase("compile", seconds)
            self._clock_excluded += seconds

    def _add_phase(self, phase: str, seconds: float) -> None:
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r} is not one of {PHASES}")
        self._epoch_phases[phase] += seconds
        self.totals[phase] += seconds

    def end_iteration(self) -> dict[str, float]:
        """Close the current iteration; returns (and, on rank 0, writes) its timings.

        While :attr:`warmup_iterations` remain, the iteration's seconds go to the 'compile' phase.
        """
        it = self._iter
        calc, comm, wait = it["calc"], it["comm"], it["wait"]
        it["calc"] = it["comm"] = it["wait"] = 0.0
        warmup = self.warmup_iterations > 0
        if warmup:
            self.warmup_iterations -= 1
            self._add_phase("compile", calc + comm + wait)
            self._clock_excluded += calc + comm + wait
        else:
            ep, tot = self._epoch_times, self.totals
            ep["calc"] += calc
            ep["comm"] += comm
            ep["wait"] += wait
            tot["calc"] += calc
            tot["comm"] += comm
            tot["wait"] += wait
        row = (self.iteration, calc, comm, wait, warmup)
        self.iteration += 1
        ACTIVITY.iteration = self.iteration
        if self.board is not None:
            self.board.iteration(self.iteration, self._train)
        if self.write:
            self._pending.append(row)
        return dict(zip(("iteration",) + TIMERS, row[:4]))

    def _flush_iterations(self) -> None:
        if self._pending:
            lines = []
            for i, calc, comm, wait, warmup in self._pending:
                row = {"iteration": i, "calc": round(calc, 6), "comm": round(comm, 6), "wait": round(wait, 6)}
                lines.append(json.dumps({**row, "compile": True} if warmup else row) + "\n")
            self._append("iterations.jsonl", lines)
            self._pending.clear()

    def train_means(self) -> tuple[float, float]:
        loss, err, n = self._train
        return (loss / n, err / n) if n else (float("nan"), float("nan"))

    def train_sums(self) -> list[float]:
        """[loss*n, error*n, n] of this rank's training since the last epoch end."""
        return list(self._train)

    def val_sums(self) -> list[float]:
        """[loss*n, error*n, n] of this rank's validation since the last epoch end."""
        return list(self._val)

    def end_epoch(self, epoch: int, extra: dict[str, Any]) -> dict[str, Any]:
        """Close an epoch; ``extra`` carries rank-aggregated metrics. Returns the epoch record."""
        train_loss, train_err = self.train_means()
        record = {
            "epoch": epoch,
            "train_loss": train_loss,
            "train_error": train_err,
            **{f"{k}_s": round(v, 6) for k, v in self._epoch_times.items()},
            **{f"{k}_s": round(v, 6) for k, v in self._epoch_phases.items()},
            "elapsed_no_compile_s": round(time.perf_counter() - self._clock_start - self._clock_excluded, 6),
            **extra,
        }
        self.epochs.append(record)
        if self.board is not None:
            self.board.epoch(record)
        self._train = [0.0, 0.0, 0]
        self._val = [0.0, 0.0, 0]
        self._val_top5 = [0.0, 0]
        self._epoch_times = {k: 0.0 for k in TIMERS}
        self._epoch_phases = {k: 0.0 for k in PHASES}
        if self.write:
            self._append("epochs.jsonl", [json.dumps(record) + "\n"])
            self._flush_iterations()
        return record

    def write_summary(self, summary: dict[str, Any], plots: bool = True) -> None:
        """Write ``summary.json`` (with this rank's ``compile_s`` unless ``summary`` has one) and (by default)
        redraw the run's PNG plots."""
        if not self.write:
            return
        self._flush_iterations()
        summary = {**summary, "compile_s": summary.get("compile_s", round(self.totals["compile"], 6))}
        atomic_write_text(self._files_dir / "summary.json", json.dumps(summary, indent=2), root=self._root,
                          label="RUN_DIR")
        if self.board is not None:
            self.board.summary(summary)
        if plots:
            try:
                plot_run(self.run_dir)
            except Exception as err:  # a plot must never fail a training run
                log.warning("plots of %s not drawn: %s", self.run_dir, err)

    def close(self) -> None:
        if self.write:
            self._flush_iterations()
        if self.board is not None:
            self.board.close()
            self.board = None


#: what the watchdog is told a rank does inside each timer, and whether that waits on other ranks
_ACTIVITY_OF = {"calc": ("computing", False), "comm": ("an exchange", True), "wait": ("waiting", True)}


class _Timer:
    """Re-entrant-free timer context for one kind (cheaper than a generator context manager).

    Entering and leaving a timer is progress for the watchdog (``theanompi.session.watchdog.ACTIVITY``).
    """

    __slots__ = ("recorder", "kind", "frames")

    def __init__(self, recorder: Recorder, kind: str):
        self.recorder = recorder
        self.kind = kind
        self.frames: list[list[float]] = []

    def __enter__(self) -> None:
        frame = [time.perf_counter(), 0.0]
        self.frames.append(frame)
        self.recorder._stack.append(frame)
        self.recorder._open_kinds.append(self.kind)
        ACTIVITY.progress(*_ACTIVITY_OF[self.kind])

    def __exit__(self, *exc) -> None:
        frame = self.frames.pop()
        kinds = self.recorder._open_kinds
        kinds.pop()
        ACTIVITY.progress(*(_ACTIVITY_OF[kinds[-1]] if kinds else ()))
        stack = self.recorder._stack
        stack.pop()
        elapsed = time.perf_counter() - frame[0]
        self.recorder._iter[self.kind] += elapsed - frame[1]
        if stack:
            stack[-1][1] += elapsed


USAGE = ("usage: python -m theanompi.session.recorder RUN_DIR [--tensorboard] (a directory with epochs.jsonl; "
         "--tensorboard: write its TensorBoard events instead of its plots)\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m theanompi.session.recorder RUN_DIR``: redraw a run's plots; with ``--tensorboard``, write its
    TensorBoard events from its records (:func:`theanompi.session.tensorboard.write_run`)."""
    argv = sys.argv[1:] if argv is None else argv
    paths = [arg for arg in argv if arg != "--tensorboard"]
    if len(paths) != 1 or not Path(paths[0]).is_dir():
        sys.stderr.write(USAGE)
        return 2
    if "--tensorboard" in argv:
        try:
            paths = [str(p) for p in write_run(paths[0])]
        except ValueError as err:
            sys.stderr.write(f"theanompi.session.recorder: {err}\n")
            return 2
    else:
        paths = [str(p) for p in plot_run(paths[0])]
        if not paths:
            sys.stderr.write(f"theanompi.session.recorder: {argv[0]} has no epochs.jsonl records\n")
            return 2
    for path in paths:
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
