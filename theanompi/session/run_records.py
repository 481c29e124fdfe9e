"""Records that never mix: a fresh session on a reused directory sets the earlier session's files aside, a
resumed one continues them from its checkpoint.

A fresh session (no RESUME) that finds records of an earlier one in its RUN_DIR
(:data:`RECORD_NAMES`) moves them into ``RUN_DIR/previous/<time>/`` before any rank
starts, and the checkpoints of its CHECKPOINT_DIR (when it writes checkpoints
there) into ``CHECKPOINT_DIR/previous/<time>/``: its curves, summary and
``latest`` are its own, and nothing is lost. ``<time>`` is a directory this session
creates; ``previous`` must be a directory of the same file system (no link: the
entries are reached without following one, :mod:`theanompi.core.no_follow`), and
what is moved is the entry itself (a link is moved, never followed).

A resumed session appends to the records it finds, after dropping every record past
its checkpoint (:func:`trim_records`): the epochs and iterations it trains again, in
``epochs.jsonl`` and ``iterations.jsonl``, in the TensorBoard events
(``tensorboard/``; the earlier session's text points, its options and summary, too:
the resumed session writes its own) and, for EASGD, in every worker's records
(``workers/worker-K/``, trimmed at that worker's own step count).

Example
-------
>>> import tempfile, json
>>> run = Path(tempfile.mkdtemp())
>>> _ = (run / "epochs.jsonl").write_text("".join(json.dumps({"epoch": e}) + "\\n" for e in range(3)))
>>> trim_records(run, {"epoch": 0, "iteration": 10})
>>> (run / "epochs.jsonl").read_text()
'{"epoch": 0}\\n'
>>> moved = set_aside_records(run)
>>> moved.relative_to(run).parts[0], sorted(p.name for p in moved.iterdir())
('previous', ['epochs.jsonl'])
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from theanompi.core.no_follow import Folder, bounded_lines, refusal
from theanompi.core.safe_io import write_in
from theanompi.session.tensorboard import BOARD_DIR, trim_events

#: what a session writes into RUN_DIR (recorder, records, plots; EASGD's workers their own under workers/)
RECORD_NAMES = ("epochs.jsonl", "iterations.jsonl", "summary.json", "final_params.npz", "curves.png",
                "breakdown.png", "workers", "tensorboard")
#: where a fresh session puts what an earlier one left
PREVIOUS = "previous"
#: the longest line a records file holds (a longer one is not a record theanompi wrote)
LINE_LIMIT = 1 << 20
#: the folder of RUN_DIR where EASGD's workers keep their records
WORKERS = "workers"


def set_aside(directory: Path | Folder, names: list[str], label: str = "RUN_DIR") -> Path | None:
    """Move the entries ``names`` of ``directory`` that exist into ``directory/previous/<time>/`` (a directory this
    call creates); return that folder, or None when there was nothing to move. UnexpectedEntry when ``previous`` is
    not a directory of ``directory``'s file system, or an entry to move is a mount point."""
    if not isinstance(directory, Folder):
        with Folder.open(directory, label=label) as folder:
            return set_aside(folder, names, label)
    folder = directory
    present = [name for name in names if folder.entry(name) is not None]
    if not present:
        return None
    for name in present:
        st = folder.entry(name)
        if st is not None and st.st_dev != folder.device:
            raise refusal(folder.label, folder.path / name, "on another file system (a mount point)",
                          "an entry it moves into previous/ by renaming")
    with folder.folder(PREVIOUS, create=True) as previous:
        if os.fstat(previous.fd).st_dev != folder.device:
            raise refusal(folder.label, previous.path, "on another file system (a mount point)",
                          "a directory of its own file system (records are set aside by renaming)")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for k in range(1, 1000):
            name = stamp if k == 1 else f"{stamp}-{k}"
            try:
                target = previous.make_dir(name)
            except FileExistsError:
                continue
            except OSError as err:  # e.g. no permission: name the place in full
                raise OSError(err.errno, err.strerror, str(previous.path / name)) from None
            with target:
                for entry in present:
                    try:
                        folder.move(entry, target, entry)
                    except OSError as err:
                        raise OSError(err.errno, err.strerror, str(folder.path / entry)) from None
            return target.path
    raise FileExistsError(f"{folder.path / PREVIOUS}: no free name for {stamp}")


def set_aside_records(run_dir: Path | Folder) -> Path | None:
    """:func:`set_aside` of an earlier session's records in ``run_dir``."""
    return set_aside(run_dir, list(RECORD_NAMES))


def set_aside_checkpoints(checkpoint_dir: Path | Folder) -> Path | None:
    """:func:`set_aside` of an earlier session's checkpoints (and ``latest``) in ``checkpoint_dir``."""
    if not isinstance(checkpoint_dir, Folder):
        with Folder.open(checkpoint_dir, label="CHECKPOINT_DIR") as folder:
            return set_aside_checkpoints(folder)
    names = [name for name in checkpoint_dir.names() if name.startswith("ckpt-epoch-") and name.endswith(".hkl")]
    return set_aside(checkpoint_dir, names + ["latest"], "CHECKPOINT_DIR")


def keep_rows(folder: Folder, name: str, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Rewrite the records file ``name`` of ``folder`` (JSON lines) with the rows ``keep`` accepts (lines cut short
    when a session was killed are dropped); return the rows kept. Nothing when there is no such file."""
    st = folder.expect(name, directory=False)
    if st is None:
        return []
    kept: list[dict[str, Any]] = []
    dropped = 0
    for line in bounded_lines(folder.path / name, LINE_LIMIT, "records file", root=folder.path, label=folder.label):
        try:
            row = json.loads(line)
        except ValueError:
            dropped += 1
            continue  # a line cut short when that session was killed
        if isinstance(row, dict) and keep(row):
            kept.append(row)
        else:
            dropped += 1
    if dropped:
        def write(f: IO[bytes]) -> None:
            for row in kept:
                f.write((json.dumps(row) + "\n").encode())

        write_in(folder, name, write, mode=stat.S_IMODE(st.st_mode))
    return kept


def _number(row: dict[str, Any], key: str) -> float:
    value = row.get(key, -1)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else -1


def _trim_one(run_dir: Folder, records: str, epoch_ok: Callable[[dict[str, Any]], bool], iteration: int) -> None:
    """The records of ``run_dir/records`` ('' for RUN_DIR's own) and their TensorBoard events: the epochs ``epoch_ok``
    keeps, the iterations before ``iteration``."""
    folder = run_dir.folder(records) if records else run_dir
    try:
        epochs = keep_rows(folder, "epochs.jsonl", epoch_ok)
        keep_rows(folder, "iterations.jsonl", lambda row: _number(row, "iteration") < iteration)
    finally:
        if folder is not run_dir:
            folder.close()
    last_epoch = max((int(_number(row, "epoch")) for row in epochs), default=-1)
    board = BOARD_DIR if not records else f"{BOARD_DIR}/{records}"
    if run_dir.entry(BOARD_DIR) is not None:
        trim_events(run_dir, board, last_step=last_epoch + 1, last_iteration=iteration)


def trim_records(run_dir: Path | Folder, resume_point: dict[str, Any]) -> None:
    """Drop the records of ``run_dir`` past a checkpoint (``resume_point``: the ``epoch`` it was taken after, the
    ``iteration``, and for EASGD each worker's steps, ``worker_iterations``): the resumed session writes them again.
    Every entry is reached without following a link (UnexpectedEntry otherwise)."""
    if not isinstance(run_dir, Folder):
        with Folder.open(run_dir, label="RUN_DIR") as folder:
            trim_records(folder, resume_point)
            return
    epoch, iteration = int(resume_point["epoch"]), int(resume_point["iteration"])
    _trim_one(run_dir, "", lambda row: _number(row, "epoch") <= epoch, iteration)
    workers = resume_point.get("worker_iterations") or []
    if run_dir.expect(WORKERS, directory=True) is None:
        return
    for k, steps in enumerate(workers):
        name = f"{WORKERS}/worker-{k}"
        with run_dir.folder(WORKERS) as folder:
            if folder.expect(f"worker-{k}", directory=True) is None:
                continue
        _trim_one(run_dir, name, _steps_at_most(int(steps)), int(steps))


def _steps_at_most(steps: int) -> Callable[[dict[str, Any]], bool]:
    """Which epoch rows of an EASGD worker's records stay: each says how many steps the worker had taken when the
    epoch ended."""
    return lambda row: 0 <= _number(row, "iterations") <= steps
