"""Files written whole or not at all: readers never see one half-written, and no link is written through.

:func:`atomic_write` is the one way this package replaces a file that another
process (a rank, the launcher, a person) may read at the same moment: it writes
a temporary file beside the target, then renames it over the target. The
temporary file is created ``O_EXCL | O_NOFOLLOW`` (a link planted under its name
is removed, never followed) and the rename replaces the entry itself, so a link
at the target's name is replaced, never written through; below ``root`` every
directory is reached without following a link
(:mod:`theanompi.core.no_follow`). :func:`save_hickle_atomically` writes a hickle
file (a checkpoint) that way. Reading files that could carry code is
:mod:`theanompi.core.safe_load`'s.

Example
-------
>>> import tempfile
>>> path = atomic_write_text(Path(tempfile.mkdtemp()) / "latest", "ckpt-epoch-0003.hkl")
>>> sorted(p.name for p in path.parent.iterdir())
['latest']
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING

from theanompi.core.no_follow import Folder, folder_of

if TYPE_CHECKING:
    from _typeshed import StrPath


def atomic_write(path: StrPath, write: Callable[[IO[bytes]], object], mode: int | None = None,
                 root: StrPath | None = None, label: str = "") -> Path:
    """Replace ``path`` by what ``write(f)`` writes to ``f``, a temporary file beside it, then a rename.

    Readers see the old file or the new one, never a partial one. The temporary
    name is hidden, unique to this process and keeps ``path``'s suffix; it is
    removed if ``write`` fails (when it can be: the error that stopped the write is
    the one raised). ``mode``, if given, is the new file's permission bits whatever
    the umask (e.g. 0o600). ``root``: the directory from which ``path``'s folder is
    reached without following links, its missing folders created (default: the
    folder itself); ``label`` names it in errors (RUN_DIR, ...).

    Example
    -------
    >>> import tempfile, numpy as np
    >>> d = Path(tempfile.mkdtemp())
    >>> atomic_write(d / "a.npz", lambda f: np.savez(f, x=np.arange(3))).name
    'a.npz'
    >>> sorted(p.name for p in d.iterdir())
    ['a.npz']
    """
    path = Path(path)
    folder, name = folder_of(path, root, create=root is not None, label=label)
    with folder:
        write_in(folder, name, write, mode)
    return path


def write_in(folder: Folder, name: str, write: Callable[[IO[bytes]], object], mode: int | None = None) -> None:
    """:func:`atomic_write` of entry ``name`` of an open :class:`~theanompi.core.no_follow.Folder`."""
    tmp = temporary_path(name).name
    folder.discard(tmp)  # a stale one of a killed writer with this pid, or a link planted there: never followed
    fd = folder.open_file(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    f = os.fdopen(fd, "w+b")
    try:
        write(f)
        if mode is not None:
            os.fchmod(f.fileno(), mode)
        f.close()  # flushes: a full disk says so here
        folder.move(tmp, folder, name)
    except BaseException:
        with suppress(OSError):  # closing flushes what is left (a full disk again), and a read-only file system
            f.close()            # cannot remove the temporary file: the write's own error is the one raised
        with suppress(OSError):
            folder.discard(tmp)
        raise


def temporary_path(path: StrPath, pid: int | None = None) -> Path:
    """The temporary file :func:`atomic_write` writes ``path`` to in process ``pid`` (default: this one).

    Example
    -------
    >>> temporary_path("ckpt/ckpt-epoch-0003.hkl", pid=42).name
    '.ckpt-epoch-0003.tmp42.hkl'
    """
    path = Path(path)
    return path.with_name(f".{path.stem}.tmp{os.getpid() if pid is None else pid}{path.suffix}")


def atomic_write_text(path: StrPath, text: str, mode: int | None = None, root: StrPath | None = None,
                      label: str = "") -> Path:
    """Replace ``path``'s contents by ``text`` (see :func:`atomic_write`).

    Example
    -------
    >>> import tempfile
    >>> path = atomic_write_text(Path(tempfile.mkdtemp()) / "latest", "ckpt-epoch-0003.hkl")
    >>> path.read_text()
    'ckpt-epoch-0003.hkl'
    """
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")), mode=mode, root=root, label=label)


def append_lines(path: StrPath, lines: list[str], root: StrPath | None = None, label: str = "") -> Path:
    """Append ``lines`` to the regular file ``path`` (created if missing), never through a link: below ``root``
    every directory is reached without following one, and the file is opened ``O_NOFOLLOW`` (a link, a FIFO or a
    device there: UnexpectedEntry). For records that grow line by line (``epochs.jsonl``, ``restarts.jsonl``).

    Example
    -------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = append_lines(d / "r.jsonl", ['{"a": 1}\\n']); append_lines(d / "r.jsonl", ['{"a": 2}\\n']).read_text()
    '{"a": 1}\\n{"a": 2}\\n'
    """
    path = Path(path)
    folder, name = folder_of(path, root, create=root is not None, label=label)
    with folder:
        fd = folder.open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "a") as f:
        f.writelines(lines)
    return path


def os_error_code(err: BaseException) -> int | None:
    """The errno behind an error: an OSError's in its chain, or the ``errno = N`` HDF5 writes into its messages
    (h5py reports a full disk as a RuntimeError); None if there is none.

    Example
    -------
    >>> os_error_code(RuntimeError("Unable to flush file (file write failed: errno = 28, ...)"))
    28
    >>> os_error_code(ValueError("no errno here")) is None
    True
    """
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno:
            return cause.errno
        said = re.search(r"\berrno = (\d+)", str(cause))
        if said and int(said.group(1)):
            return int(said.group(1))
        cause = cause.__cause__ or cause.__context__
    return None


def save_hickle_atomically(obj: object, path: StrPath, root: StrPath | None = None, label: str = "") -> Path:
    """Write ``obj`` with hickle to ``path`` (never half-written, never through a link: :func:`atomic_write`, with
    its ``root`` and ``label``). A write the system refused (a full disk: h5py says so inside a RuntimeError) raises
    OSError with that errno, naming ``path``."""
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is written
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is written

    def write(f: IO[bytes]) -> None:
        try:
            with h5py.File(f, "w") as hdf5:  # the temporary file's descriptor: h5py never opens a path
                hickle.dump(obj, hdf5)
        except Exception as err:
            code = os_error_code(err)
            if code is None:
                raise
            raise OSError(code, os.strerror(code), str(path)) from None

    return atomic_write(path, write, root=root, label=label)
