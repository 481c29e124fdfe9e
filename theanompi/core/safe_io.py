"""Files written whole or not at all: readers never see one half-written.

:func:`atomic_write` is the one way this package replaces a file that another
process (a rank, the launcher, a person) may read at the same moment: it writes
a temporary file beside the target, then renames it over the target.
:func:`save_hickle_atomically` writes a hickle file (a checkpoint) that way.
Reading files that could carry code is :mod:`theanompi.core.safe_load`'s.

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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import StrPath


def atomic_write(path: StrPath, write: Callable[[Path], object], mode: int | None = None) -> Path:
    """Replace ``path`` by what ``write(tmp)`` writes to a temporary path beside it, then a rename.

    Readers see the old file or the new one, never a partial one. The temporary
    name is hidden, unique to this process and keeps ``path``'s suffix (writers
    such as ``numpy.savez`` add one otherwise); it is removed if ``write`` fails
    (when it can be: the error that stopped the write is the one raised). ``mode``,
    if given, is the new file's permission bits whatever the umask (e.g. 0o600).

    Example
    -------
    >>> import tempfile, numpy as np
    >>> d = Path(tempfile.mkdtemp())
    >>> atomic_write(d / "a.npz", lambda tmp: np.savez(tmp, x=np.arange(3))).name
    'a.npz'
    >>> sorted(p.name for p in d.iterdir())
    ['a.npz']
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):  # e.g. a read-only file system: the write's own error says it
            tmp.unlink(missing_ok=True)
        raise
    return path


def temporary_path(path: StrPath, pid: int | None = None) -> Path:
    """The temporary file :func:`atomic_write` writes ``path`` to in process ``pid`` (default: this one).

    Example
    -------
    >>> temporary_path("ckpt/ckpt-epoch-0003.hkl", pid=42).name
    '.ckpt-epoch-0003.tmp42.hkl'
    """
    path = Path(path)
    return path.with_name(f".{path.stem}.tmp{os.getpid() if pid is None else pid}{path.suffix}")


def atomic_write_text(path: StrPath, text: str, mode: int | None = None) -> Path:
    """Replace ``path``'s contents by ``text`` (see :func:`atomic_write`).

    Example
    -------
    >>> import tempfile
    >>> path = atomic_write_text(Path(tempfile.mkdtemp()) / "latest", "ckpt-epoch-0003.hkl")
    >>> path.read_text()
    'ckpt-epoch-0003.hkl'
    """
    return atomic_write(path, lambda tmp: tmp.write_text(text), mode=mode)


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


def save_hickle_atomically(obj: object, path: StrPath) -> Path:
    """Write ``obj`` with hickle to ``path`` (never half-written: :func:`atomic_write`). A write the system
    refused (a full disk: h5py says so inside a RuntimeError) raises OSError with that errno, naming ``path``."""
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    def write(tmp: Path) -> None:
        try:
            hickle.dump(obj, str(tmp), mode="w")
        except Exception as err:
            code = os_error_code(err)
            if code is None:
                raise
            raise OSError(code, os.strerror(code), str(path)) from None

    return atomic_write(path, write)
