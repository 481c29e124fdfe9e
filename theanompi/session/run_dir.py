"""A session's claim on its directories: one session per RUN_DIR and per CHECKPOINT_DIR, no stale rank status, and
nothing in them that is not what theanompi keeps there.

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

Everything below RUN_DIR and CHECKPOINT_DIR is reached without following a link
(:mod:`theanompi.core.no_follow`): the lock file is opened ``O_NOFOLLOW``, and a
reused directory's entries are checked against what theanompi keeps there
(:data:`RUN_DIR_ENTRIES`, :data:`CHECKPOINT_DIR_ENTRIES`) before any rank starts:
a link, a FIFO, a file where a directory belongs (or the reverse), a directory on
another file system is refused in one line naming it and what to do
(:func:`check_entries`). Entries of other names are the user's and left alone.
A CHECKPOINT_DIR inside RUN_DIR (the default ``RUN_DIR/checkpoints``) is reached
from RUN_DIR without links too (:func:`owning_root`).

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
>>> os.mkfifo(run_dir / "ranks.tmp"); os.rmdir(run_dir / "ranks"); os.rename(run_dir / "ranks.tmp", run_dir / "ranks")
>>> claim_run_dir(run_dir)                                            # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theanompi.core.no_follow.UnexpectedEntry: RUN_DIR: .../run/ranks is a FIFO (named pipe), where theanompi keeps \
a directory: remove or rename it, or choose another RUN_DIR
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import Folder, UnexpectedEntry, describe_entry
from theanompi.session.rank_status import STATUS_DIR, clear_statuses

LOCK_NAME = ".session.lock"
#: the entries of RUN_DIR theanompi writes: name -> True for a directory, False for a regular file
RUN_DIR_ENTRIES = {LOCK_NAME: False, "session.json": False, STATUS_DIR: True, "previous": True,
                   "epochs.jsonl": False, "iterations.jsonl": False, "summary.json": False, "final_params.npz": False,
                   "curves.png": False, "breakdown.png": False, "workers": True, "tensorboard": True,
                   "mpiexec.app": False, "restarts.jsonl": False}
#: the entries of a CHECKPOINT_DIR theanompi writes (and ``ckpt-epoch-NNNN.hkl`` files)
CHECKPOINT_DIR_ENTRIES = {LOCK_NAME: False, "latest": False, "previous": True}
#: directories whose entries are moved by rename (a mount point there would fail with EXDEV)
SAME_FILE_SYSTEM = ("previous", STATUS_DIR)


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


def owning_root(path: str | os.PathLike[str], run_dir: str | os.PathLike[str]) -> Path:
    """The directory below which ``path`` (a CHECKPOINT_DIR) is reached without following links: RUN_DIR when it lies
    inside RUN_DIR (the default ``RUN_DIR/checkpoints``), else ``path`` itself (the user named it).

    >>> str(owning_root("/r/checkpoints", "/r")), str(owning_root("/ckpts", "/r"))
    ('/r', '/ckpts')
    """
    path, run_dir = Path(path), Path(run_dir)
    return run_dir if path.is_relative_to(run_dir) and path != run_dir else path


def make_root(what: str, directory: Path) -> None:
    """Create ``directory`` (a root the user named: RUN_DIR, CHECKPOINT_DIR) with its parents. ConfigError naming
    ``what`` when it is something else than a directory, a link of another user's, or cannot be created."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise _not_writable(what, directory, err) from None
    if st is not None and stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.geteuid()):
        raise ConfigError(f"{what}={str(directory)!r} is {describe_entry(directory, st)} owned by uid {st.st_uid}, "
                          f"not by this user: give the directory itself, or choose another {what}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        kind = describe_entry(directory, os.lstat(directory))
        raise ConfigError(f"{what}={str(directory)!r} is {kind}, not a directory: remove or rename it, or choose "
                          f"another {what}") from None
    except OSError as err:
        raise _not_writable(what, directory, err) from None


def open_claimed(what: str, directory: Path, root: Path | None = None) -> Folder:
    """``directory`` as a :class:`~theanompi.core.no_follow.Folder`: from ``root`` without links (created), or, with
    no ``root``, the directory the user named (created with its parents)."""
    if root is None or root == directory:
        make_root(what, directory)
        root, relative = directory, Path(".")
    else:
        relative = directory.relative_to(root)
    try:
        return Folder.open(root, relative, create=True, label=what)
    except UnexpectedEntry:
        raise
    except OSError as err:
        raise _not_writable(what, directory, err) from None


def lock_dir(what: str, folder: Folder) -> int:
    """Hold ``folder/.session.lock`` (never through a link) with this process's pid in it; return its fd.
    ConfigError naming ``what`` (the option) when another process holds it or the directory is not writable."""
    directory = folder.path
    try:
        fd = folder.open_file(LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except UnexpectedEntry:
        raise
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


def check_entries(folder: Folder, expected: dict[str, bool], set_aside: tuple[str, ...] = ()) -> None:
    """UnexpectedEntry for the first entry of ``folder`` named in ``expected`` that is not the kind it names (True: a
    directory, else a regular file), or that is a directory on another file system where entries are moved by rename
    (:data:`SAME_FILE_SYSTEM`). The entries ``set_aside`` (a fresh session moves them away whatever they are) need
    only be on the directory's file system."""
    for name, directory in expected.items():
        if name in set_aside:
            st = folder.entry(name)
            if st is not None and st.st_dev != folder.device:
                folder.expect(name, stat.S_ISDIR(st.st_mode), same_device=True)
            continue
        folder.expect(name, directory, same_device=name in SAME_FILE_SYSTEM)


def check_checkpoints(folder: Folder, set_aside: bool) -> None:
    """:func:`check_entries` of a CHECKPOINT_DIR the session writes, its ``ckpt-epoch-*.hkl`` files included."""
    checkpoints = {name: False for name in folder.names() if name.startswith("ckpt-epoch-")}
    names = tuple(checkpoints) + ("latest",) if set_aside else ()
    check_entries(folder, {**CHECKPOINT_DIR_ENTRIES, **checkpoints}, set_aside=names)


def claim_run_dir(run_dir: Path, checkpoint_dir: Path | None = None, fresh: bool = True) -> RunDirClaim:
    """Create and lock ``run_dir`` (and ``checkpoint_dir``, the checkpoints the session writes, if given), check
    their entries (:func:`check_entries`; ``fresh``: the records will be set aside, whatever they are), clear the rank
    status files. ConfigError if a directory is busy, not writable or holds an unexpected entry."""
    from theanompi.session.run_records import RECORD_NAMES  # noqa: PLC0415 - run_records imports this module

    run_dir = Path(run_dir)
    with open_claimed("RUN_DIR", run_dir) as folder:
        claim = RunDirClaim(run_dir, [lock_dir("RUN_DIR", folder)])
        try:
            check_entries(folder, RUN_DIR_ENTRIES, set_aside=RECORD_NAMES if fresh else ())
            try:
                clear_statuses(folder)
            except OSError as err:
                raise ConfigError(f"RUN_DIR: {run_dir / STATUS_DIR} cannot be emptied: {err.strerror or err}: give "
                                  "this user write access to it, or remove it, or choose another RUN_DIR") from None
            if checkpoint_dir is not None and Path(checkpoint_dir).resolve() != run_dir.resolve():
                checkpoint_dir = Path(checkpoint_dir)
                root = owning_root(checkpoint_dir, run_dir)
                with open_claimed("CHECKPOINT_DIR", checkpoint_dir, root if root == run_dir else None) as ckpts:
                    claim.fds.append(lock_dir("CHECKPOINT_DIR", ckpts))
                    check_checkpoints(ckpts, set_aside=fresh)
        except BaseException:
            claim.release()
            raise
    return claim
