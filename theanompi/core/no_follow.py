"""Files inside the directories theanompi owns (RUN_DIR, CHECKPOINT_DIR, the caches) reached without following a
link, and files read within a size bound.

Whoever can write into a run directory (a group-writable project folder, a scratch space, a RUN_DIR a job script
reuses) could plant a symbolic link where theanompi writes: ``RUN_DIR/.session.lock -> ~/.bashrc`` would be
truncated, ``RUN_DIR/previous -> /elsewhere`` would carry the records out. So below a *root* (the directory the user
named, which may itself be a link: that is the user's choice) every directory is opened from its parent's descriptor
with ``O_NOFOLLOW | O_DIRECTORY`` (:class:`Folder`), every file with ``O_NOFOLLOW``, after an ``lstat``, and checked to
be a regular file; a new file is created ``O_EXCL``. A link, a FIFO, a device, a directory where a file belongs (or
the reverse) is refused with :class:`UnexpectedEntry`: one line naming the path, what it is and what to do.

Reading (:func:`read_bounded`, :func:`bounded_lines`): a file is read only if it is a regular file (a FIFO would block,
a device or a link to one never ends) and only up to a limit (:class:`FileTooLarge` beyond). Files the user names
(a cfg file, a hostfile) may be links to regular files; files below a root are read without following one.

Example
-------
>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> (root / "outside").write_text("keep me")
7
>>> (root / "run").mkdir(); (root / "run" / "notes").symlink_to(root / "outside")
>>> with Folder.open(root / "run", label="RUN_DIR") as run:
...     fd = run.open_file("epochs.jsonl", os.O_WRONLY | os.O_CREAT)
...     os.close(fd)
...     run.open_file("notes", os.O_WRONLY)                                 # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theanompi.core.no_follow.UnexpectedEntry: RUN_DIR: .../run/notes is a symbolic link (to .../outside), where \
theanompi keeps a regular file: remove or rename it, or choose another RUN_DIR
>>> (root / "outside").read_text(), read_bounded(root / "run" / "epochs.jsonl", 10, "records", root=root)
('keep me', b'')
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from theanompi.core.errors import ConfigError

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class UnexpectedEntry(ConfigError):
    """An entry of a directory theanompi writes (or a file it reads) is not what belongs there: a link, a FIFO, a
    device, a file where a directory belongs or the reverse, another file system. Nothing was written through it."""


class FileTooLarge(ConfigError):
    """A file is larger than what theanompi reads of such a file."""


def kind_of(mode: int) -> str:
    """What a file mode says an entry is, in words.

    >>> kind_of(os.lstat("/").st_mode), kind_of(stat.S_IFIFO)
    ('a directory', 'a FIFO (named pipe)')
    """
    return next((words for test, words in _KINDS if test(mode)), "a special file")


def describe_entry(path: Path, st: os.stat_result) -> str:
    """``kind_of`` for an lstat result, naming a link's target."""
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            return "a symbolic link"
    return kind_of(st.st_mode)


def refusal(label: str, path: Path, what_it_is: str, belongs: str) -> UnexpectedEntry:
    """The one-line error for an entry that is ``what_it_is`` where ``belongs`` belongs."""
    prefix = f"{label}: " if label else ""
    instead = f", or choose another {label}" if label else ""
    return UnexpectedEntry(f"{prefix}{path} is {what_it_is}, where theanompi keeps {belongs}: remove or rename "
                           f"it{instead}")


class Folder:
    """An open directory reached from a root without following a link; its entries are opened, created, moved and
    removed by name relative to its descriptor (see the module's docstring). ``label`` (RUN_DIR, CHECKPOINT_DIR, ...)
    names the root in errors. Use as a context manager, or :meth:`close` it."""

    def __init__(self, fd: int, path: Path, label: str = "", device: int = -1):
        self.fd = fd
        self.path = path
        self.label = label
        #: the file system of the root (st_dev): an entry on another one cannot be moved by rename
        self.device = device

    @classmethod
    def open(cls, root: str | os.PathLike[str], relative: str | os.PathLike[str] = ".", create: bool = False,
             label: str = "") -> Folder:
        """``root`` (followed as the user named it: with ``create``, made with its parents where missing), then each
        part of ``relative`` without following links (created with ``create``). FileNotFoundError when a part is
        missing and ``create`` is false; UnexpectedEntry when one is not a directory."""
        root = Path(root)
        if create:
            root.mkdir(parents=True, exist_ok=True)  # a rank on another host: RUN_DIR need not be shared
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        folder = cls(fd, root, label, os.fstat(fd).st_dev)
        try:
            for part in Path(relative).parts:
                if part in (".", ""):
                    continue
                if part == "..":
                    raise ValueError(f"{relative}: '..' leaves the root {root}")
                inner = folder.folder(part, create=create)
                folder.close()
                folder = inner
        except BaseException:
            folder.close()
            raise
        return folder

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # ----- looking -------------------------------------------------------------------------------------------------
    def entry(self, name: str) -> os.stat_result | None:
        """The ``lstat`` of entry ``name`` (None when there is none)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def refuse(self, name: str, st: os.stat_result, belongs: str) -> UnexpectedEntry:
        """The error for entry ``name`` (its lstat ``st``) where ``belongs`` belongs."""
        return refusal(self.label, self.path / name, describe_entry(self.path / name, st), belongs)

    def expect(self, name: str, directory: bool, same_device: bool = False) -> os.stat_result | None:
        """The lstat of ``name`` if it is a directory (``directory``) or a regular file, None if absent; else
        UnexpectedEntry. ``same_device``: a directory on another file system (a mount point) is refused too."""
        st = self.entry(name)
        if st is None:
            return None
        belongs = "a directory" if directory else "a regular file"
        if not (stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)):
            raise self.refuse(name, st, belongs)
        if same_device and st.st_dev != self.device:
            raise refusal(self.label, self.path / name, "on another file system (a mount point)",
                          f"{belongs} of {self.path}'s own file system")
        return st

    # ----- directories ---------------------------------------------------------------------------------------------
    def folder(self, name: str, create: bool = False) -> Folder:
        """The directory ``name`` in this one (``a/b``: further down), opened without following a link (created with
        ``create``)."""
        first, _, rest = name.partition("/")
        if rest:
            with self.folder(first, create) as inner:
                return inner.folder(rest, create)
        for _ in range(3):  # a directory made or removed by another process meanwhile: look again
            try:
                fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=self.fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o777, dir_fd=self.fd)
                except FileExistsError:
                    pass
                continue
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = self.entry(name)
                if st is None:
                    continue
                raise self.refuse(name, st, "a directory") from None
            return Folder(fd, self.path / name, self.label, self.device)
        raise FileNotFoundError(errno.ENOENT, "it keeps vanishing", str(self.path / name))

    def make_dir(self, name: str) -> Folder:
        """A new directory ``name`` that this process creates (FileExistsError when anything is there), opened."""
        os.mkdir(name, 0o777, dir_fd=self.fd)
        return self.folder(name)

    # ----- files ---------------------------------------------------------------------------------------------------
    def open_file(self, name: str, flags: int, mode: int = 0o666) -> int:
        """A descriptor of the regular file ``name`` opened with ``flags`` (``O_CREAT``, ``O_EXCL``, ... allowed),
        never through a link, never a FIFO or device (UnexpectedEntry); FileNotFoundError without ``O_CREAT``."""
        before = self.entry(name)
        if before is not None and not stat.S_ISREG(before.st_mode):
            raise self.refuse(name, before, "a regular file")
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=self.fd)
        except OSError as err:
            st = self.entry(name)
            if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) and st is not None:
                raise self.refuse(name, st, "a regular file") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise refusal(self.label, self.path / name, kind_of(st.st_mode), "a regular file")
        os.set_blocking(fd, True)
        return fd

    def discard(self, name: str) -> None:
        """Remove entry ``name`` if it is not a directory (a link is removed, never followed); nothing if absent."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def remove_tree(self, name: str) -> None:
        """Remove the directory ``name`` and everything in it, never following a link (shutil's descriptor walk)."""
        shutil.rmtree(name, dir_fd=self.fd)

    def move(self, name: str, to: Folder, new_name: str) -> None:
        """Rename entry ``name`` into ``to`` as ``new_name`` (the entry itself: a link is moved, not followed)."""
        os.replace(name, new_name, src_dir_fd=self.fd, dst_dir_fd=to.fd)


def folder_of(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, create: bool = False,
              label: str = "") -> tuple[Folder, str]:
    """The :class:`Folder` that holds ``path`` (reached from ``root`` without links; ``root`` None: the folder itself
    is the root) and ``path``'s name in it."""
    path = Path(path)
    if root is None:
        return Folder.open(path.parent, label=label), path.name
    relative = path.parent.relative_to(Path(root))
    return Folder.open(root, relative, create=create, label=label), path.name


# ----- reading -------------------------------------------------------------------------------------------------------
def _open_followed(path: Path, what: str) -> int:
    """``path`` opened for reading, links followed (a file the user names), if it ends at a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    via = " (a link to one)" if path.is_symlink() else ""
    raise UnexpectedEntry(f"{what} {str(path)!r} is {kind_of(st.st_mode)}{via}, not a regular file")


def open_regular(path: str | os.PathLike[str], what: str, root: str | os.PathLike[str] | None = None,
                 label: str = "") -> int:
    """A descriptor for reading the regular file ``path``: below ``root`` without following a link, else (a file
    the user names) following links to a regular file. UnexpectedEntry for anything else; FileNotFoundError."""
    path = Path(path)
    if root is None:
        return _open_followed(path, what)
    folder, name = folder_of(path, root, label=label)
    with folder:
        return folder.open_file(name, os.O_RDONLY)


def _too_large(what: str, path: Path, limit: int) -> FileTooLarge:
    return FileTooLarge(f"{what} {str(path)!r} is larger than {limit:,} bytes, more than such a file holds: "
                        "is it the right file?")


def read_bounded(path: str | os.PathLike[str], limit: int, what: str, root: str | os.PathLike[str] | None = None,
                 label: str = "") -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`); FileTooLarge beyond ``limit`` bytes.

    >>> read_bounded("/dev/zero", 10, "--hostfile")
    Traceback (most recent call last):
    ...
    theanompi.core.no_follow.UnexpectedEntry: --hostfile '/dev/zero' is a character device, not a regular file
    """
    fd = open_regular(path, what, root, label)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size > limit:
            raise _too_large(what, Path(path), limit)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _too_large(what, Path(path), limit)
    return data


def bounded_lines(path: str | os.PathLike[str], line_limit: int, what: str,
                  root: str | os.PathLike[str] | None = None, label: str = "") -> Iterator[str]:
    """The lines of the regular file ``path`` (see :func:`open_regular`), read as they come (a records file may be
    large); a line longer than ``line_limit`` bytes is skipped (it is no line theanompi wrote)."""
    fd = open_regular(path, what, root, label)
    with os.fdopen(fd, "rb") as f:
        while True:
            line = f.readline(line_limit + 1)
            if not line:
                return
            if len(line) > line_limit and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # the rest of the overlong line
                    line = f.readline(line_limit + 1)
                continue
            yield line.decode("utf-8", errors="replace").rstrip("\n")
