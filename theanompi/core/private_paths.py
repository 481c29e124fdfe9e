"""Directories only this user can change: the checks ssh and pip make before trusting what lies in one.

The caches keep pickles, compiled C modules and compiler flags: whoever can write
into them runs code as the user who loads them. :func:`untrusted_tree` says why a
directory cannot be trusted, or None:

* every directory above it must be owned by root or the user and writable by
  nobody else -- unless its sticky bit is set (``/tmp``), so that no one can
  rename it away and put another one in its place;
* the directory itself, and everything under it, must be owned by the user; and
  writable by neither group nor others, unless the directory is private (mode
  ``0700``: nobody else can even reach what lies inside).

:func:`make_private_dir` creates a directory ``0700`` (its missing parents with the
usual mode). A reason names the path, its owner or its mode, ready for a one-line
message.

Example
-------
>>> import tempfile
>>> root = Path(tempfile.mkdtemp()) / "cache"
>>> make_private_dir(root)
>>> untrusted_tree(root) is None, oct(root.stat().st_mode & 0o777)
(True, '0o700')
>>> root.chmod(0o777)
>>> untrusted_tree(root)                                  # doctest: +ELLIPSIS
'.../cache is writable by group and others (mode 0777)'
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _mode(st: os.stat_result) -> str:
    return f"mode {stat.S_IMODE(st.st_mode):04o}"


def writable_by_others(st: os.stat_result) -> str | None:
    """'group', 'others' or 'group and others' when they may write to the file or directory, else None.

    >>> writable_by_others(os.stat_result((0o40775,) + (0,) * 9))
    'group'
    """
    group, other = bool(st.st_mode & stat.S_IWGRP), bool(st.st_mode & stat.S_IWOTH)
    return {(True, True): "group and others", (True, False): "group", (False, True): "others"}.get((group, other))


def _owner_problem(path: Path, st: os.stat_result, allowed: tuple[int, ...]) -> str | None:
    if st.st_uid not in allowed:
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    return None


def untrusted_entry(path: Path, st: os.stat_result, check_mode: bool = True) -> str | None:
    """Why one file or directory (its ``lstat``) cannot be trusted, or None: not the user's, or (with
    ``check_mode``) writable by group or others."""
    problem = _owner_problem(path, st, (os.geteuid(),))
    who = writable_by_others(st) if check_mode else None
    return problem or (f"{path} is writable by {who} ({_mode(st)})" if who else None)


def untrusted_ancestors(path: Path) -> str | None:
    """Why a directory above ``path`` lets someone else replace it, or None (see the module's docstring)."""
    for parent in Path(os.path.abspath(path)).parents:
        try:
            st = parent.stat()
        except OSError as err:
            return f"{parent} cannot be read: {err.strerror or err}"
        problem = _owner_problem(parent, st, (0, os.geteuid()))
        if problem:
            return problem
        who = writable_by_others(st)
        if who and not st.st_mode & stat.S_ISVTX:
            return f"{parent} is writable by {who} ({_mode(st)})"
    return None


def untrusted_tree(root: Path) -> str | None:
    """Why ``root`` or anything under it cannot be trusted, or None (see the module's docstring). A ``root``
    that is a symbolic link must be the user's (or root's), and the directories above it and above what it
    points to are checked."""
    root = Path(os.path.abspath(root))
    problem = untrusted_ancestors(root)
    if problem is None and root.is_symlink():
        problem = _owner_problem(root, root.lstat(), (0, os.geteuid()))
        root = Path(os.path.realpath(root))
        problem = problem or untrusted_ancestors(root)
    if problem:
        return problem
    try:
        st = root.stat()
    except OSError as err:
        return f"{root} cannot be read: {err.strerror or err}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a directory"
    problem = untrusted_entry(root, st)
    if problem:
        return problem
    reachable = bool(st.st_mode & 0o077)  # group or others may reach inside: the entries' modes count too
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as err:
            return f"{directory} cannot be read: {err.strerror or err}"
        for entry in entries:
            try:
                entry_st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed meanwhile (another process's temporary file)
                continue
            problem = untrusted_entry(Path(entry.path), entry_st, check_mode=reachable)
            if problem:
                return problem
            if stat.S_ISDIR(entry_st.st_mode):
                pending.append(Path(entry.path))
    return None


def make_private_dir(path: Path) -> None:
    """Create ``path`` with mode 0700 if it does not exist (its missing parents with the usual mode)."""
    Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
