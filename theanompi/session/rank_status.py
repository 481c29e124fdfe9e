"""Status files of a session's ranks in ``RUN_DIR/ranks/``: who started, finished, failed or stalled.

Every rank leaves one small file per event, ``RUN_DIR/ranks/rank-N.STATE``:

* ``pid``: the rank's process id, written when it started (tools and tests find each rank there);
* ``done``: the rank finished its rule's work;
* ``failed``: one line naming the rank and its error;
* ``stall``: the JSON record its watchdog wrote (``theanompi.session.watchdog``).

and two files of the session, not of a rank: ``stop.request``, which an elastic launcher writes to have the
session stop at its next checkpoint (to restart it with more workers, :mod:`theanompi.launch.elastic`), and
``stopped.json``, which rank 0 writes when the session stopped so, naming that checkpoint.

The rank entry point (``theanompi.rules.rank_main``) and the watchdog write them; the
launcher (``theanompi.launch.mpiexec``, ``theanompi.session.remote``) reads them; the run
directory's claim (``theanompi.session.run_dir``) empties the folder for a new session.
They are written and read without following a link below RUN_DIR, and read only if they are
small regular files (:mod:`theanompi.core.no_follow`).

Example
-------
>>> import tempfile
>>> run_dir = Path(tempfile.mkdtemp())
>>> _ = write_status(run_dir, 0, "pid", "4242")
>>> _ = write_status(run_dir, 1, "pid", "4243")
>>> _ = write_status(run_dir, 1, "failed", "rank 1 (worker on cpu1): ValueError: boom")
>>> status_path(run_dir, 1, "failed").relative_to(run_dir).as_posix()
'ranks/rank-1.failed'
>>> read_failures(run_dir)
['rank 1 (worker on cpu1): ValueError: boom']
>>> lost_ranks(run_dir, 2), has_status(run_dir, 0, "done")
([0], False)
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from theanompi.core.no_follow import Folder, read_bounded
from theanompi.core.safe_io import atomic_write_text

#: the folder of RUN_DIR that holds the status files
STATUS_DIR = "ranks"
#: the events a rank can leave a file for
STATES = ("pid", "done", "failed", "stall")
#: what a watchdog's record holds (``theanompi.session.watchdog``)
STALL_FIELDS = frozenset({"who", "where", "waiting", "since", "iteration"})
#: the most a status file holds (one line, or a watchdog's JSON record)
STATUS_LIMIT = 64 * 1024


def status_dir(run_dir: str | Path) -> Path:
    """``RUN_DIR/ranks``."""
    return Path(run_dir) / STATUS_DIR


def status_path(run_dir: str | Path, rank: int, state: str) -> Path:
    """``RUN_DIR/ranks/rank-N.STATE`` (ValueError for a state not in :data:`STATES`)."""
    if state not in STATES:
        raise ValueError(f"rank status {state!r} is not one of {STATES}")
    return status_dir(run_dir) / f"rank-{int(rank)}.{state}"


def write_status(run_dir: str | Path, rank: int, state: str, text: str) -> Path:
    """Write ``text`` (one line; a newline is added) as ``rank``'s ``state`` file, atomically.

    OSError (e.g. a full disk) is the caller's to handle; nothing half-written is left.
    """
    return atomic_write_text(status_path(run_dir, rank, state), text.rstrip("\n") + "\n", root=run_dir,
                             label="RUN_DIR")


def has_status(run_dir: str | Path, rank: int, state: str) -> bool:
    """Whether ``rank`` left a ``state`` file."""
    return os.path.lexists(status_path(run_dir, rank, state))


def clear_statuses(run_dir: Folder | str | Path) -> None:
    """Start ``RUN_DIR/ranks`` empty (``run_dir``: RUN_DIR, open or a path): files an earlier session left can
    neither stop nor be blamed for a new one. Nothing is followed: a link, or anything but a directory of RUN_DIR's
    file system, at ``ranks`` is refused (UnexpectedEntry)."""
    if not isinstance(run_dir, Folder):
        with Folder.open(run_dir, label="RUN_DIR") as folder:
            return clear_statuses(folder)
    if run_dir.expect(STATUS_DIR, directory=True, same_device=True) is not None:
        run_dir.remove_tree(STATUS_DIR)
    run_dir.make_dir(STATUS_DIR).close()


def read_status(run_dir: str | Path, path: Path) -> str:
    """The text of a status file below ``run_dir`` (OSError, or a ConfigError for a link, a FIFO or a file too
    large for a status)."""
    return read_bounded(path, STATUS_LIMIT, "status file", root=run_dir, label="RUN_DIR").decode(errors="replace")


def _ranks_with(run_dir: str | Path, state: str) -> list[tuple[int, Path]]:
    """(rank, path) of every ``rank-N.STATE`` file, in rank order (names that are not a rank are skipped)."""
    found = []
    for path in status_dir(run_dir).glob(f"rank-*.{state}"):
        try:
            found.append((int(path.stem.split("-", 1)[1]), path))
        except ValueError:
            continue
    return sorted(found)


def read_failures(run_dir: str | Path) -> list[str]:
    """The lines failed ranks left, in rank order (empty or unreadable files skipped)."""
    messages = []
    for _, path in _ranks_with(run_dir, "failed"):
        try:
            text = read_status(run_dir, path).strip()
        except (OSError, ValueError):  # a ConfigError (not a regular file) is a ValueError too
            continue
        if text:
            messages.append(text)
    return messages


def rank_pid(run_dir: str | Path, rank: int) -> int | None:
    """The process id ``rank`` wrote when it started (None: no readable ``pid`` file).

    >>> import tempfile
    >>> run_dir = Path(tempfile.mkdtemp()); _ = write_status(run_dir, 3, "pid", "4242")
    >>> rank_pid(run_dir, 3), rank_pid(run_dir, 4)
    (4242, None)
    """
    try:
        return int(read_status(run_dir, status_path(run_dir, rank, "pid")).strip())
    except (OSError, ValueError):  # not there (yet), or not a number: a ConfigError is a ValueError too
        return None


def read_stalls(run_dir: str | Path) -> dict[int, dict]:
    """rank -> the record its watchdog wrote (unreadable records, and records without its fields, skipped)."""
    stalls = {}
    for rank, path in _ranks_with(run_dir, "stall"):
        try:
            record = json.loads(read_status(run_dir, path))
        except (ValueError, OSError):
            continue
        if isinstance(record, dict) and isinstance(record.get("since"), int | float) and STALL_FIELDS <= set(record):
            stalls[rank] = record
    return stalls


def lost_ranks(run_dir: str | Path, n_ranks: int) -> list[int]:
    """Ranks that started (``pid``) but neither finished (``done``) nor failed: killed, or still running."""
    return [r for r in range(n_ranks)
            if has_status(run_dir, r, "pid") and not has_status(run_dir, r, "done")
            and not has_status(run_dir, r, "failed")]


#: the launcher's request that the session stop at its next checkpoint, and rank 0's answer that it did
STOP_REQUEST, STOPPED = "stop.request", "stopped.json"


def request_stop(run_dir: str | Path, reason: str) -> Path:
    """Ask the ranks of the session in ``run_dir`` to stop at their next checkpoint (rank 0 reads it there)."""
    with Folder.open(run_dir, STATUS_DIR, create=True, label="RUN_DIR"):  # ranks/ made below RUN_DIR, no link
        pass
    return atomic_write_text(status_dir(run_dir) / STOP_REQUEST, reason.rstrip("\n") + "\n", root=run_dir,
                             label="RUN_DIR")


def stop_requested(run_dir: str | Path) -> bool:
    """Whether the launcher asked the session to stop at its next checkpoint.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = request_stop(d, "grow to 3 workers")
    >>> stop_requested(d), read_stopped(d)
    (True, None)
    >>> _ = write_stopped(d, {"checkpoint": "ckpt-epoch-0001.hkl"}); read_stopped(d)
    {'checkpoint': 'ckpt-epoch-0001.hkl'}
    """
    try:
        with Folder.open(run_dir, STATUS_DIR, label="RUN_DIR") as folder:
            st = folder.entry(STOP_REQUEST)
    except (OSError, ValueError):  # no ranks/ (nothing asked), or not a directory (refused at the next claim)
        return False
    return st is not None and stat.S_ISREG(st.st_mode)  # a link or a FIFO planted there asks nothing


def write_stopped(run_dir: str | Path, record: dict) -> Path:
    """Rank 0: the session stopped at a checkpoint as asked (``record`` names it)."""
    return atomic_write_text(status_dir(run_dir) / STOPPED, json.dumps(record), root=run_dir, label="RUN_DIR")


def read_stopped(run_dir: str | Path) -> dict | None:
    """What :func:`write_stopped` wrote (None: the session did not stop on request)."""
    try:
        record = json.loads(read_status(run_dir, status_dir(run_dir) / STOPPED))
    except (OSError, ValueError):  # missing, a link, a FIFO, too large (a ConfigError is a ValueError)
        return None
    return record if isinstance(record, dict) else None
