"""TensorBoard event files of a session's records, in ``RUN_DIR/tensorboard/`` (``TENSORBOARD=true``, the default).

Every recorder that writes records (:class:`~theanompi.session.recorder.Recorder` with ``write``) gets a
:class:`Board` (:func:`open_board`) that writes the same records as TensorBoard events, beside them:

* per epoch (step: the epoch, from 1): ``train/loss``, ``train/error``, ``val/loss``, ``val/error``,
  ``val/accuracy`` (``val/error_top5`` for Theano-MPI models), ``speed/samples_per_s`` and ``time/calc_s``,
  ``time/comm_s``, ``time/wait_s``, ``time/compile_s``, ``time/epoch_s`` and ``comm/bytes_sent`` (the bytes the
  workers' exchanges sent in the epoch, :mod:`theanompi.comm.traffic`) -- whichever the record has;
* per iteration (step: iterations done, every ``TENSORBOARD_EVERY``): ``train/loss_per_iteration``, the mean loss
  of the batches this recorder saw since the previous point (worker 0's; EASGD's server: the workers' reports);
* as text: ``session/options`` (rule, devices, model, every option) at the start, ``session/summary`` at the end;
* a restart of an elastic session (step: the iteration it resumes at): ``session/restart`` (why, from which
  checkpoint, the workers before and after) and the scalar ``elastic/workers`` (the workers after it).

The session's records (``RUN_DIR``) go to ``RUN_DIR/tensorboard/``; records a rule keeps per worker
(``RUN_DIR/workers/worker-K``, EASGD) to ``RUN_DIR/tensorboard/workers/worker-K/``: TensorBoard shows each
directory as a run (``tensorboard --logdir RUN_DIR/tensorboard``). :func:`write_run` writes the events of an older
run directory from its ``epochs.jsonl`` records (``python -m theanompi.session.recorder RUN_DIR --tensorboard``).

The files are written with the ``tensorboard`` package's own record writer and protocol buffers: neither TensorFlow
nor PyTorch is imported, and only a rank that writes events imports ``tensorboard`` (about 0.15 s). They are created
below RUN_DIR without following a link (:mod:`theanompi.core.no_follow`). A resumed session first drops the events
past its checkpoint from the event files it finds (:func:`trim_events`), so that TensorBoard shows one value per
step.

Example
-------
>>> import tempfile
>>> board = Board(EventFile(Path(tempfile.mkdtemp())), every=2)
>>> board.iteration(1, [0.9, 0.3, 32])          # not a multiple of 2: nothing
>>> board.iteration(2, [1.6, 0.5, 64])          # (1.6 - 0) / 64 over the 64 samples since the start
>>> board.epoch({"epoch": 0, "val_accuracy": 0.9, "val_loss": float("nan")})
>>> board.close()
>>> sorted(board.events.written)
['train/loss_per_iteration', 'val/accuracy']
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from theanompi.core.no_follow import Folder, folder_of, read_bounded
from theanompi.core.safe_io import write_in
from theanompi.session.plots import read_epochs
from theanompi.session.spec import SessionSpec

#: the directory under RUN_DIR that holds the events
BOARD_DIR = "tensorboard"
#: epoch record key -> TensorBoard tag (the first key present of a tuple wins)
EPOCH_TAGS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("train_loss_all", "train_loss"), "train/loss"),
    (("train_error_all", "train_error"), "train/error"),
    (("val_loss",), "val/loss"),
    (("val_error",), "val/error"),
    (("val_accuracy",), "val/accuracy"),
    (("val_error_top5",), "val/error_top5"),
    (("ema_val_loss",), "val/loss_averaged"),
    (("ema_val_accuracy",), "val/accuracy_averaged"),
    (("lr",), "train/learning_rate"),
    (("samples_per_s",), "speed/samples_per_s"),
    (("calc_s",), "time/calc_s"),
    (("comm_s",), "time/comm_s"),
    (("wait_s",), "time/wait_s"),
    (("compile_s",), "time/compile_s"),
    (("epoch_s",), "time/epoch_s"),
    (("bytes_sent",), "comm/bytes_sent"),
)
ITERATION_TAG = "train/loss_per_iteration"
#: the tags of an elastic session's restart (:meth:`Board.restart`; step: the iteration it resumed at), kept by a
#: later restart's trimming up to its checkpoint's iteration
RESTART_TAGS = ("session/restart", "elastic/workers")
#: the event files' names (TensorBoard finds them by this prefix)
EVENTS_PREFIX = "events.out.tfevents."
#: the longest event record read back when trimming (a longer one is damage, not an event theanompi wrote)
RECORD_LIMIT = 64 << 20
#: the most a summary.json holds
SUMMARY_LIMIT = 16 << 20


class EventFile:
    """One TensorBoard event file in ``log_dir``, created at the first write (reached from ``root`` without following
    a link; default: ``log_dir`` itself); :attr:`written` counts points per tag."""

    def __init__(self, log_dir: Path, root: Path | None = None):
        self.log_dir = Path(log_dir)
        self.root = root
        self.written: dict[str, int] = {}
        self._records: Any = None  # tensorboard's RecordWriter over the open file

    def _writer(self) -> Any:
        if self._records is None:
            # tensorboard (protocol buffers) only where events are written: the launcher imports this layer
            from tensorboard.compat.proto import event_pb2  # noqa: PLC0415 - see above
            from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: PLC0415 - see above

            name = f"{EVENTS_PREFIX}{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.theanompi"
            if self.root is None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
            folder, name = folder_of(self.log_dir / name, self.root or self.log_dir, create=True, label="RUN_DIR")
            with folder:
                fd = folder.open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self._records = RecordWriter(os.fdopen(fd, "ab"))  # closed by close()
            self._records.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
                                .SerializeToString())
        return self._records

    def scalars(self, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        """One point of each tag in ``values`` at ``step`` (values that are not finite numbers are left out)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: PLC0415 - see _writer

        kept = {tag: float(v) for tag, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if not kept:
            return
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)
                                             for tag, value in kept.items()])
        self._write(event_pb2.Event(wall_time=wall_time or time.time(), step=step, summary=summary))
        for tag in kept:
            self.written[tag] = self.written.get(tag, 0) + 1

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        """A text point (TensorBoard's Text tab renders ``markdown``)."""
        from tensorboard.compat.proto import (  # noqa: PLC0415 - see _writer
            event_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
        )
        from tensorboard.plugins.text.metadata import create_summary_metadata  # noqa: PLC0415 - see _writer

        tensor = tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[markdown.encode("utf-8")],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor,
                                          metadata=create_summary_metadata(display_name=tag, description=""))
        self._write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
        self.written[tag] = self.written.get(tag, 0) + 1

    def _write(self, event: Any) -> None:
        self._writer().write(event.SerializeToString())

    def flush(self) -> None:
        if self._records is not None:
            self._records.flush()

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
            self._records = None


class Board:
    """The TensorBoard events of one recorder's records (see the module's docstring); ``every``: iterations between
    training-loss points (0: none)."""

    def __init__(self, events: EventFile, every: int):
        self.events = events
        self.every = every
        self._mark = (0.0, 0.0)  # the recorder's training loss sum and samples at the previous point

    def iteration(self, done: int, train_sums: list[float]) -> None:
        """After ``done`` iterations; ``train_sums`` is the recorder's [loss*n, error*n, n] since the epoch began."""
        if not self.every or done % self.every:
            return
        loss_sum, samples = train_sums[0], train_sums[2]
        if samples > self._mark[1]:
            self.events.scalars(done, {ITERATION_TAG: (loss_sum - self._mark[0]) / (samples - self._mark[1])})
        self._mark = (loss_sum, samples)

    def epoch(self, record: Mapping[str, Any], wall_time: float | None = None) -> None:
        """An epoch record (``epochs.jsonl``'s): its scalars at step epoch + 1, written through to the file."""
        values = {}
        for keys, tag in EPOCH_TAGS:
            key = next((k for k in keys if k in record), None)
            if key is not None:
                values[tag] = record[key]
        self.events.scalars(int(record["epoch"]) + 1, values, wall_time=wall_time)
        self.events.flush()
        self._mark = (0.0, 0.0)  # the recorder's sums start again with the next epoch

    def options(self, spec: SessionSpec) -> None:
        """The session's rule, devices, model and options, as a table."""
        rows = [("RULE", spec.rule), ("DEVICES", ";".join(spec.devices)), ("MODELFILE", spec.modelfile),
                ("MODELCLASS", spec.modelclass)]
        values = spec.options.to_dict()
        rows += [(option.cfg_key, values[name]) for name, option in spec.options.schema().items()]
        rows += [(f"MODEL_{name.upper()}", value) for name, value in sorted(spec.model_options.items())]
        self.events.text("session/options", _table(("key", "value"), rows))
        self.events.flush()

    def restart(self, entry: Mapping[str, Any]) -> None:
        """An elastic session's restart (``summary.json["restarts"]``'s entry), at the iteration it resumes at."""
        step = int(entry.get("iteration") or 0)
        self.events.text("session/restart", _table(("entry", "value"), list(entry.items())), step=step)
        self.events.scalars(step, {"elastic/workers": float(entry.get("workers_after") or 0)})
        self.events.flush()

    def summary(self, summary: Mapping[str, Any]) -> None:
        """``summary.json``'s content, as a table (each worker's record as a row of its own table)."""
        rows = [(key, value) for key, value in summary.items() if key != "per_worker"]
        text = _table(("entry", "value"), rows)
        workers = summary.get("per_worker")
        if isinstance(workers, list) and workers and all(isinstance(w, dict) for w in workers):
            columns = sorted({key for w in workers for key in w})
            text += "\n\n" + _table(("worker", *columns), [(k, *(w.get(c, "") for c in columns))
                                                          for k, w in enumerate(workers)])
        self.events.text("session/summary", text)
        self.events.flush()

    def close(self) -> None:
        self.events.close()


def _table(header: tuple[str, ...], rows: Iterable[tuple[Any, ...]]) -> str:
    """A markdown table (TensorBoard's Text tab draws it)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def board_dir(run_dir: Path | str, records_dir: Path | str) -> Path:
    """Where the events of the records in ``records_dir`` go: ``RUN_DIR/tensorboard`` and below it the same path as
    the records' below RUN_DIR.

    >>> str(board_dir("/r", "/r")), str(board_dir("/r", "/r/workers/worker-1"))
    ('/r/tensorboard', '/r/tensorboard/workers/worker-1')
    """
    run_dir, records_dir = Path(run_dir), Path(records_dir)
    below = records_dir.relative_to(run_dir) if records_dir.is_relative_to(run_dir) else Path(records_dir.name)
    return run_dir / BOARD_DIR / below


def open_board(spec: SessionSpec, records_dir: Path) -> Board | None:
    """The Board of the records written into ``records_dir`` (None with TENSORBOARD=false), the session's options
    already written."""
    if not spec.options.tensorboard:
        return None
    board = Board(EventFile(board_dir(spec.run_dir, records_dir), root=spec.run_dir), spec.options.tensorboard_every)
    board.options(spec)
    if spec.restart is not None and Path(records_dir) == spec.run_dir:
        board.restart(spec.restart)
    return board


def write_run(run_dir: Path | str) -> list[Path]:
    """TensorBoard events of an older run directory, from its records: the epochs of ``RUN_DIR`` and of every
    ``RUN_DIR/workers/*``, the options (``session.json``) and ``summary.json``; returns the event directories
    written. The per-iteration loss is not in the records and is not written. ValueError when ``RUN_DIR/tensorboard``
    already holds events (the session wrote them) or the directory has no epoch records.
    """
    run_dir = Path(run_dir)
    existing = sorted((run_dir / BOARD_DIR).rglob("events.out.tfevents.*"))
    if existing:
        raise ValueError(f"{run_dir / BOARD_DIR} already has TensorBoard events ({existing[0].name}); "
                         "remove that directory to write them again from the records")
    sources = [run_dir, *sorted(p for p in (run_dir / "workers").glob("*") if p.is_dir())]
    spec_path = run_dir / "session.json"
    spec = SessionSpec.load(spec_path, root=run_dir) if spec_path.is_file() else None
    start = spec_path.stat().st_mtime if spec else None  # the session's start, for the points' wall times
    written = []
    for records_dir in sources:
        epochs = read_epochs(records_dir, root=run_dir)
        if not epochs:
            continue
        board = Board(EventFile(board_dir(run_dir, records_dir), root=run_dir), every=0)
        if spec is not None:
            board.options(spec)
        for record in epochs:
            elapsed = record.get("elapsed_s")
            board.epoch(record, wall_time=start + elapsed if start and isinstance(elapsed, (int, float)) else None)
        summary_path = records_dir / "summary.json"
        if summary_path.is_file():
            board.summary(json.loads(read_bounded(summary_path, SUMMARY_LIMIT, "summary", root=run_dir)))
        board.close()
        written.append(board.events.log_dir)
    if not written:
        raise ValueError(f"{run_dir} has no epochs.jsonl records")
    return written


# ----- trimming on resume ---------------------------------------------------------------------------------------------
def _records(f: IO[bytes]) -> Iterator[bytes]:
    """The records of a TFRecord stream (length, its CRC, data, its CRC), up to the first one cut short or damaged
    (a session killed while writing)."""
    while True:
        head = f.read(12)
        if len(head) < 12:
            return
        (length,) = struct.unpack("<Q", head[:8])
        if length > RECORD_LIMIT:
            return
        data = f.read(length)
        if len(data) < length or len(f.read(4)) < 4:
            return
        yield data


def _keep_event(event: Any, last_step: int, last_iteration: int) -> bool:
    """Whether an event of an earlier session stays when the session resumes after epoch step ``last_step``
    (epochs count from 1) at iteration ``last_iteration``: its scalars up to there, no text (options, summary) but
    the restarts' (:data:`RESTART_TAGS`, up to ``last_iteration``)."""
    if not event.HasField("summary"):
        return True  # the file's version record
    tags = [value.tag for value in event.summary.value]
    if all(tag in RESTART_TAGS for tag in tags):  # an elastic session's earlier restarts: at their iteration
        return event.step <= last_iteration
    if any(value.HasField("tensor") for value in event.summary.value):
        return False
    limit = last_iteration if tags == [ITERATION_TAG] else last_step
    return event.step <= limit


def trim_events(run_dir: Folder, log_dir: str, last_step: int, last_iteration: int) -> None:
    """Rewrite the event files in ``run_dir/log_dir`` (reached without following links) with only the events a
    session resumed after epoch step ``last_step`` at ``last_iteration`` keeps (see :func:`_keep_event`)."""
    from tensorboard.compat.proto import event_pb2  # noqa: PLC0415 - see EventFile._writer
    from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: PLC0415 - see EventFile._writer

    try:
        folder = run_dir.folder(log_dir)
    except FileNotFoundError:
        return
    with folder:
        for name in folder.names():
            if not name.startswith(EVENTS_PREFIX):
                continue
            with os.fdopen(folder.open_file(name, os.O_RDONLY), "rb") as f:
                raw = list(_records(f))
            kept = []
            for data in raw:
                try:
                    event = event_pb2.Event.FromString(data)
                except Exception:  # protobuf's DecodeError: damage, where a killed session stopped writing
                    break
                if _keep_event(event, last_step, last_iteration):
                    kept.append(data)
            if len(kept) == len(raw):
                continue

            def write(out: IO[bytes], kept: list[bytes] = kept) -> None:
                writer = RecordWriter(out)
                for data in kept:
                    writer.write(data)
                writer.flush()

            write_in(folder, name, write)
