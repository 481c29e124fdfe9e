"""Records that never mix: a fresh session on a reused directory sets the earlier session's files aside, a
resumed one continues them from its checkpoint.

A fresh session (no RESUME) that finds records of an earlier one in its RUN_DIR
(:data:`RECORD_NAMES`) moves them into ``RUN_DIR/previous/<time>/`` before any rank
starts, and the checkpoints of its CHECKPOINT_DIR (when it writes checkpoints
there) into ``CHECKPOINT_DIR/previous/<time>/``: its curves, summary and
``latest`` are its own, and nothing is lost. A resumed session appends to the
records it finds, after dropping those past its checkpoint (epochs and
iterations that the resumed session trains again).

Example
-------
>>> import tempfile, json
>>> run = Path(tempfile.mkdtemp())
>>> _ = (run / "epochs.jsonl").write_text("".join(json.dumps({"epoch": e}) + "\\n" for e in range(3)))
>>> trim_records(run, epoch=0, iteration=10)
>>> (run / "epochs.jsonl").read_text()
'{"epoch": 0}\\n'
>>> moved = set_aside_records(run)
>>> moved.relative_to(run).parts[0], sorted(p.name for p in moved.iterdir())
('previous', ['epochs.jsonl'])
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from theanompi.core.safe_io import atomic_write_text

#: what a session writes into RUN_DIR (recorder, records, plots; EASGD's workers their own under workers/)
RECORD_NAMES = ("epochs.jsonl", "iterations.jsonl", "summary.json", "final_params.npz", "curves.png",
                "breakdown.png", "workers", "tensorboard")
#: where a fresh session puts what an earlier one left
PREVIOUS = "previous"


def set_aside(directory: Path, names: list[str]) -> Path | None:
    """Move the entries ``names`` of ``directory`` that exist into ``directory/previous/<time>/``; return that
    folder, or None when there was nothing to move."""
    directory = Path(directory)
    present = [name for name in names if os.path.lexists(directory / name)]
    if not present:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = directory / PREVIOUS / stamp
    k = 1
    while target.exists():
        k += 1
        target = directory / PREVIOUS / f"{stamp}-{k}"
    target.mkdir(parents=True)
    for name in present:
        os.replace(directory / name, target / name)
    return target


def set_aside_records(run_dir: Path) -> Path | None:
    """:func:`set_aside` of an earlier session's records in ``run_dir``."""
    return set_aside(run_dir, list(RECORD_NAMES))


def set_aside_checkpoints(checkpoint_dir: Path) -> Path | None:
    """:func:`set_aside` of an earlier session's checkpoints (and ``latest``) in ``checkpoint_dir``."""
    directory = Path(checkpoint_dir)
    names = sorted(p.name for p in directory.glob("ckpt-epoch-*.hkl")) + ["latest"]
    return set_aside(directory, names)


def _keep_rows(path: Path, keep) -> None:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut short when that session was killed
        if isinstance(row, dict) and keep(row):
            kept.append(line + "\n")
    if len(kept) != len(lines):
        atomic_write_text(path, "".join(kept))


def trim_records(run_dir: Path, epoch: int, iteration: int) -> None:
    """Drop the records of ``run_dir`` past a checkpoint taken after ``epoch`` at ``iteration``: the resumed
    session writes them again."""
    run_dir = Path(run_dir)
    _keep_rows(run_dir / "epochs.jsonl", lambda row: row.get("epoch", -1) <= epoch)
    _keep_rows(run_dir / "iterations.jsonl", lambda row: row.get("iteration", -1) < iteration)
