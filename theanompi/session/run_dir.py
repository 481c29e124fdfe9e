"""A session's claim on its directories: one session per RUN_DIR and per CHECKPOINT_DIR, no stale rank status.

:func:`claim_run_dir` creates RUN_DIR, takes an exclusive ``flock`` on
``RUN_DIR/.session.lock`` (which holds the launcher's pid) and empties
``RUN_DIR/ranks/``, so that status files an earlier session left (``.stall``,
``.failed``, ``.done``, ``.pid``) can neither stop nor be blamed for this one.
Given the CHECKPOINT_DIR the session writes, it locks that directory the same
way, so two sessions never write checkpoints (and ``latest``) into one directory.
A second launcher on a directory in use is refused with a ConfigError naming the
first one's pid; one that cannot write a directory, with one naming it. The locks
last until :meth:`RunDirClaim.release` (the launcher calls it when the session
ends) or until the launcher process dies.

Example
-------
>>> import tempfile
>>> run_dir = Path(tempfile.mkdtemp()) / "run"
>>> claim = claim_run_dir(run_dir, checkpoint_dir=run_dir.parent / "ckpts")
>>> claim_run_dir(run_dir.parent / "other", checkpoint_dir=run_dir.parent / "ckpts")   # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: CHECKPOINT_DIR=... is in use by another session (launcher pid ...); ...
>>> claim.release()
>>> claim_run_dir(run_dir).release()
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from theanompi.core.errors import ConfigError
from theanompi.session.rank_status import clear_statuses

LOCK_NAME = ".session.lock"


class RunDirClaim:
    """The open, locked ``.session.lock`` files of a session's run directory (and checkpoint directory)."""

    def __init__(self, run_dir: Path, fds: list[int]):
        self.run_dir = run_dir
        self.fds = fds

    def release(self) -> None:
        """Let another session use the directories (idempotent)."""
        while self.fds:
            fd = self.fds.pop()
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _not_writable(what: str, path: Path, err: OSError) -> ConfigError:
    return ConfigError(f"{what}={str(path)!r} is not writable: {err.strerror or err}")


def lock_dir(what: str, directory: Path) -> int:
    """Create ``directory`` and hold ``directory/.session.lock`` with this process's pid in it; return its fd.
    ConfigError naming ``what`` (the option) when another process holds it or the directory is not writable."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise _not_writable(what, directory, err) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(f"{what}={str(directory)!r} is in use by another session (launcher pid {other}); "
                          f"give this session another {what}, or wait for that one to end") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as err:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise _not_writable(what, directory, err) from None
    return fd


def claim_run_dir(run_dir: Path, checkpoint_dir: Path | None = None) -> RunDirClaim:
    """Create and lock ``run_dir`` (and ``checkpoint_dir``, the checkpoints the session writes, if given), clear
    the rank status files (ConfigError if a directory is busy or not writable)."""
    run_dir = Path(run_dir)
    claim = RunDirClaim(run_dir, [lock_dir("RUN_DIR", run_dir)])
    try:
        try:
            clear_statuses(run_dir)
        except OSError as err:
            raise _not_writable("RUN_DIR", run_dir, err) from None
        if checkpoint_dir is not None and Path(checkpoint_dir).resolve() != run_dir.resolve():
            claim.fds.append(lock_dir("CHECKPOINT_DIR", Path(checkpoint_dir)))
    except BaseException:
        claim.release()
        raise
    return claim
