"""A session's claim on its run directory: one session per RUN_DIR, no stale rank status, writable paths.

:func:`claim_run_dir` creates RUN_DIR, takes an exclusive ``flock`` on
``RUN_DIR/.session.lock`` (which holds the launcher's pid) and empties
``RUN_DIR/ranks/``, so that status files an earlier session left (``.stall``,
``.failed``, ``.done``, ``.pid``) can neither stop nor be blamed for this one.
A second launcher on the same RUN_DIR is refused with a ConfigError naming the
first one's pid. The lock lasts until :meth:`RunDirClaim.release` (the launcher
calls it when the session ends) or until the launcher process dies.

Example
-------
>>> import tempfile
>>> run_dir = Path(tempfile.mkdtemp()) / "run"
>>> claim = claim_run_dir(run_dir)
>>> claim_run_dir(run_dir)                          # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: RUN_DIR=... is in use by another session (launcher pid ...); ...
>>> claim.release()
>>> claim_run_dir(run_dir).release()
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from theanompi.core.errors import ConfigError
from theanompi.session.rank_status import clear_statuses

LOCK_NAME = ".session.lock"


class RunDirClaim:
    """The open, locked ``.session.lock`` of a run directory."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir = run_dir
        self.fd: int | None = fd

    def release(self) -> None:
        """Let another session use the directory (idempotent)."""
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _not_writable(what: str, path: Path, err: OSError) -> ConfigError:
    return ConfigError(f"{what}={str(path)!r} is not writable: {err.strerror or err}")


def claim_run_dir(run_dir: Path) -> RunDirClaim:
    """Create and lock ``run_dir``, clear its rank status files (ConfigError if busy or not writable)."""
    run_dir = Path(run_dir)
    lock_path = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise _not_writable("RUN_DIR", run_dir, err) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(f"RUN_DIR={str(run_dir)!r} is in use by another session (launcher pid {other}); "
                          "give this session another RUN_DIR, or wait for that one to end") from None
    claim = RunDirClaim(run_dir, fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        clear_statuses(run_dir)
    except OSError as err:
        claim.release()
        raise _not_writable("RUN_DIR", run_dir, err) from None
    return claim


def check_writable_dir(what: str, path: Path) -> None:
    """Create ``path`` if needed and write a probe file in it (ConfigError naming ``what`` if that fails).

    Example
    -------
    >>> check_writable_dir("CHECKPOINT_DIR", Path("/proc/no/such"))    # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: CHECKPOINT_DIR='/proc/no/such' is not writable: ...
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise _not_writable(what, path, err) from None
