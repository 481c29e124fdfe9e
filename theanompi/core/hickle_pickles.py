"""Every pickle a hickle file would make hickle unpickle, found and read without unpickling anything.

hickle reaches ``pickle.loads`` from several places -- the type of every node
(an entry of the file's type table, or a pickle in the node's own ``type``
attribute for hickle 4.0 files), the data of a node it stored as a pickle (no
type, or base type ``pickle``), loaders that keep their own ``pickle``, and for
hickle v3 files a separate reader built on ``dill``. Rather than guard each of
these, :func:`hickle_pickles` walks the file the way hickle's loader does (from
``/data``, following hard links and the references between nodes) and yields
every pickle on its way; :func:`pickle_globals` names the globals a pickle
refers to by reading its opcodes. A file whose pickles name only harmless
globals cannot run code whichever of hickle's paths reads it
(:func:`theanompi.core.safe_io.load_hickle`).

Example
-------
>>> import pickle
>>> pickle_globals(pickle.dumps([int, None]))
[('builtins', 'int')]
>>> pickle_globals(pickle.dumps(print))
[('builtins', 'print')]
"""

from __future__ import annotations

import pickletools
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np


class UncheckablePickle(ValueError):
    """A pickle (or a file) whose globals cannot be read off its opcodes."""


#: opcodes that push a string (the operands of STACK_GLOBAL)
_STRING_PUSHES = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
                  "SHORT_BINSTRING"}
#: opcodes that leave the stack as it is
_NEUTRAL = {"PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}


def pickle_globals(raw: bytes) -> list[tuple[str, str]]:
    """The ``(module, name)`` of every global the pickle ``raw`` refers to, read off its opcodes.

    A global whose name is built in a way this reading does not follow (anything but two strings pushed,
    or fetched from the memo, right before STACK_GLOBAL), an extension-registry code or a persistent id
    raises :class:`UncheckablePickle`: nothing of the kind is in a pickle Python's own pickler writes.

    >>> pickle_globals(b"\\x80\\x04\\x8c\\x05posix\\x94\\x8c\\x06system\\x94\\x93.")
    [('posix', 'system')]
    >>> pickle_globals(b"\\x80\\x04(\\x8c\\x05posix\\x8c\\x06system\\x93.")
    [('posix', 'system')]
    >>> pickle_globals(b"\\x80\\x04\\x8c\\x05posix\\x8c\\x06system\\x85\\x93.")
    Traceback (most recent call last):
    theanompi.core.hickle_pickles.UncheckablePickle: a global whose name is not two strings pushed right before it
    """
    found: list[tuple[str, str]] = []
    top: list[str | None] = []  # what each stack-changing opcode left on top (None: not a known string)
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(raw):
            name = op.name
            if name in ("GLOBAL", "INST"):
                module, _, attribute = str(arg).partition(" ")
                found.append((module, attribute))
                top.append(None)
            elif name == "STACK_GLOBAL":
                pushed = top[-2:] if len(top) >= 2 else [None, None]
                if pushed[0] is None or pushed[1] is None:
                    raise UncheckablePickle("a global whose name is not two strings pushed right before it")
                found.append((pushed[0], pushed[1]))
                top[-2:] = [None]
            elif name in ("EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"):
                raise UncheckablePickle(f"opcode {name} (an object from outside the pickle)")
            elif name == "MEMOIZE":
                memo[len(memo)] = top[-1] if top else None
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(str(arg))] = top[-1] if top else None
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                top.append(memo.get(int(str(arg))))
            elif name in _STRING_PUSHES:
                top.append(arg if isinstance(arg, str) else None)
            elif name not in _NEUTRAL:
                top.append(None)
    except UncheckablePickle:
        raise
    except Exception as err:  # pickletools: a truncated or malformed stream
        raise UncheckablePickle(f"not a readable pickle ({err})") from None
    return found


def _bytes(value: Any) -> bytes:
    return np.asarray(value).tobytes()


def _text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        value = value.ravel()[0] if value.size else b""
    return bytes(value).decode("utf-8", "replace") if isinstance(value, bytes | np.bytes_) else str(value)


def _hard_children(group: h5py.Group) -> Iterator[Any]:
    for name in group:
        link = group.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise UncheckablePickle(f"node {group.name}/{name} is a {type(link).__name__}, which hickle would follow "
                                    "outside what this check reads")
        yield group[name]


def _node_pickles(f: h5py.File, node: Any) -> Iterator[tuple[str, bytes]]:
    """The pickles hickle unpickles to load ``node`` itself: its type, and its data if stored as a pickle."""
    kind = node.attrs.get("type")
    is_dataset = isinstance(node, h5py.Dataset)
    if kind is None:  # hickle reads an untyped node as a pickle, unless it holds references to other nodes
        if is_dataset and h5py.check_ref_dtype(node.dtype) is None:
            yield f"node {node.name!r}", _bytes(node[()])
        return
    if isinstance(kind, h5py.Reference):
        entry = f[kind]
        yield f"the type of node {node.name!r}", _bytes(entry[()])
        base = entry.attrs.get("base_type")
        base = f[base].name.rsplit("/", 1)[-1] if isinstance(base, h5py.Reference) else _text(base)
    else:  # hickle 4.0: the pickled type in the attribute itself
        yield f"the type of node {node.name!r}", _bytes(kind)
        base = _text(node.attrs.get("base_type", b"pickle"))
    if base == "pickle" and is_dataset:
        yield f"node {node.name!r}", _bytes(node[()])


def hickle_pickles(f: h5py.File) -> Iterator[tuple[str, bytes]]:
    """``(where, pickle)`` for every pickle hickle would unpickle to load the open hickle 4/5 file ``f``.

    Raises :class:`UncheckablePickle` where hickle would leave the file (a soft or external link) or the
    file is not laid out as hickle writes it.
    """
    if "data" not in f:
        raise UncheckablePickle("the file has no 'data' node")
    pending = [f["data"]]
    seen: set[str] = set()
    while pending:
        node = pending.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        yield from _node_pickles(f, node)
        if isinstance(node, h5py.Group):
            pending.extend(_hard_children(node))
        elif h5py.check_ref_dtype(node.dtype) is not None:  # references to other nodes, which hickle loads too
            pending.extend(f[ref] for ref in np.asarray(node[()]).ravel() if ref)
