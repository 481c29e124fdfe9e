"""A hickle file's nodes, read without unpickling anything: their types, every pickle hickle would unpickle, their data.

hickle reaches ``pickle.loads`` from several places -- the type of every node (an
entry of the file's type table, or a pickle in the node's own ``type`` attribute
for hickle 4.0 files), the data of a node it stored as a pickle (no type, or base
type ``pickle``), loaders that keep their own ``pickle``, and for hickle v3 files a
separate reader built on ``dill``. Rather than guard each of these, this module
reads a node the way hickle's loader does and shares that reading between the two
readers of :mod:`theanompi.core.safe_load.hickle_files`:

* :func:`hickle_pickles` walks a hickle 4/5 file from ``/data`` (following hard
  links and the references between nodes) and yields every pickle on its way, so
  :func:`check_pickles` can refuse a file whose pickles name a global beyond
  :data:`~theanompi.core.safe_load.pickles.SAFE_GLOBALS` before hickle reads it
  (checkpoints);
* :func:`read_data` reads numeric arrays and dicts of them only, each node's type
  checked to be a bare reference to a plain type, so no pickle is ever loaded
  (batch files of hickle 3, 4, 5 or plain HDF5).

Each node's type is read by :func:`node_type`, a child by :func:`hard_child` (a soft
or external link, which hickle would follow out of what is checked, is refused).

Example
-------
>>> import hickle, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "c.hkl")
>>> hickle.dump({"epoch": 3}, path, mode="w")
>>> with h5py.File(path, "r") as f:
...     [(where, pickle_globals(raw)) for where, raw in hickle_pickles(f, path)]
[("the type of node '/data'", [('builtins', 'dict')]), ('the type of node \\'/data/"epoch"\\'', [('builtins', 'int')])]
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load.errors import UnsafeHickleError
from theanompi.core.safe_load.pickles import (
    SAFE_GLOBALS,
    UncheckablePickle,
    pickle_globals,
    referenced_global,
)

#: Types a node of a batch file may have (its type entry is checked to be a bare reference to one of them).
PLAIN_TYPES = {("numpy", "ndarray"), ("builtins", "dict"), ("builtins", "list"), ("builtins", "tuple"),
               ("builtins", "int"), ("builtins", "float")}
#: hickle base types read as numeric arrays (a dict is read as a dict)
_ARRAY_BASES = {"ndarray", "list", "tuple", "int", "float"}
_V3_ARRAY_TYPES = {"ndarray", "<class 'list'>", "<type 'list'>", "<class 'tuple'>", "<type 'tuple'>"}
_V3_DICT_TYPES = {"<class 'dict'>", "<type 'dict'>"}
#: what a hickle/HDF5 node may be stored as without going through pickle
_READABLE = "only arrays, lists of numbers and dicts of them are read"


def text(value: Any) -> str:
    """An HDF5 attribute (bytes, numpy bytes or a one-element array of them) as text."""
    if isinstance(value, np.ndarray):
        value = value.ravel()[0] if value.size else b""
    return bytes(value).decode("utf-8", "replace") if isinstance(value, bytes | np.bytes_) else str(value)


def hard_child(group: h5py.Group, name: str, path: Path | str) -> Any:
    """The node ``name`` of ``group``; None if there is none; UnsafeHickleError for a soft or external link."""
    link = group.get(name, getlink=True)
    if link is None:
        return None
    if not isinstance(link, h5py.HardLink):
        raise UnsafeHickleError(f"hickle file '{path}': node {posixpath.join(group.name, name)!r} is a "
                                f"{type(link).__name__}, which points outside what is checked; only data stored in "
                                "the file itself is read")
    return group[name]


def node_type(f: h5py.File, node: Any) -> tuple[bytes, str] | None:
    """``(the pickled type, the base type)`` hickle >= 4 stores for ``node``; None for a node without a type.

    h5py's KeyError, ValueError, TypeError or OSError for a malformed type: each reader says what that means.
    """
    kind = node.attrs.get("type")
    if kind is None:
        return None
    if isinstance(kind, h5py.Reference):  # hickle 5 (and 4.1): an entry of the type table
        entry = f[kind]
        base = entry.attrs.get("base_type")
        base_name = f[base].name.rsplit("/", 1)[-1] if isinstance(base, h5py.Reference) else text(base)
        return np.asarray(entry[()]).tobytes(), base_name
    return np.asarray(kind).tobytes(), text(node.attrs.get("base_type", b"pickle"))  # hickle 4.0: inline


# ----- every pickle of a hickle 4/5 file (checkpoints) -----------------------------------------------------------
def _node_pickles(f: h5py.File, node: Any) -> Iterator[tuple[str, bytes]]:
    """The pickles hickle unpickles to load ``node`` itself: its type, and its data if stored as a pickle."""
    is_dataset = isinstance(node, h5py.Dataset)
    typed = node_type(f, node)
    if typed is None:  # hickle reads an untyped node as a pickle, unless it holds references to other nodes
        if is_dataset and h5py.check_ref_dtype(node.dtype) is None:
            yield f"node {node.name!r}", np.asarray(node[()]).tobytes()
        return
    raw, base = typed
    yield f"the type of node {node.name!r}", raw
    if base == "pickle" and is_dataset:
        yield f"node {node.name!r}", np.asarray(node[()]).tobytes()


def hickle_pickles(f: h5py.File, path: Path | str) -> Iterator[tuple[str, bytes]]:
    """``(where, pickle)`` for every pickle hickle would unpickle to load the open hickle 4/5 file ``f``.

    UnsafeHickleError where hickle would leave the file (a soft or external link) or the file has no
    ``/data`` node to start from.
    """
    data = hard_child(f, "data", path)
    if data is None:
        raise UnsafeHickleError(f"refusing to load {str(path)!r}: the file has no 'data' node")
    pending = [data]
    seen: set[str] = set()
    while pending:
        node = pending.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        yield from _node_pickles(f, node)
        if isinstance(node, h5py.Group):
            pending.extend(hard_child(node, name, path) for name in node)
        elif h5py.check_ref_dtype(node.dtype) is not None:  # references to other nodes, which hickle loads too
            pending.extend(f[ref] for ref in np.asarray(node[()]).ravel() if ref)


def check_pickles(f: h5py.File, path: Path | str) -> None:
    """UnsafeHickleError unless the open file ``f`` is a hickle 4/5 file whose every pickle names only
    :data:`SAFE_GLOBALS` (nothing is unpickled); ConfigError for a file laid out otherwise."""
    if "HICKLE_VERSION" not in f.attrs:
        if "VERSION" in f.attrs or "CLASS" in f.attrs:
            raise UnsafeHickleError(f"refusing to load {str(path)!r}: it is a hickle v3 file, which hickle reads "
                                    "with dill, unpickling anything it holds; only hickle 4/5 files are read")
        raise ConfigError(f"{path}: not a readable hickle file (no HICKLE_VERSION attribute)")
    try:
        for where, raw in hickle_pickles(f, path):
            for module, name in pickle_globals(raw):
                if (module, name) not in SAFE_GLOBALS:
                    raise UnsafeHickleError(
                        f"refusing to unpickle {str(path)!r}: it references the global '{module}.{name}' in "
                        f"{where} (only containers, numbers, strings and numpy arrays are allowed)")
    except UncheckablePickle as why:
        raise UnsafeHickleError(f"refusing to load {str(path)!r}: {why}") from None
    except ConfigError:
        raise
    except (KeyError, ValueError, TypeError, OSError) as err:  # h5py on a malformed layout
        raise ConfigError(f"{path}: not a readable hickle file ({type(err).__name__}: {err})") from None


# ----- numeric data only, nothing unpickled (batch files) --------------------------------------------------------
def _pickled(path: Path | str, where: str) -> UnsafeHickleError:
    return UnsafeHickleError(f"hickle file '{path}' carries a pickled Python object at node {where!r} "
                             "(hickle pickles objects of types it does not know); refusing to load it")


def _numeric(node: Any, path: Path | str) -> np.ndarray:
    if not isinstance(node, h5py.Dataset):
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} is a group where an array was expected")
    if node.dtype.kind not in "biuf" or node.dtype.fields is not None:
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} holds non-numeric data "
                                f"(dtype {node.dtype}), e.g. a pickled object; only numeric arrays are read")
    return np.asarray(node[()])


def _plain_base_type(f: h5py.File, node: Any, path: Path | str) -> str:
    """The base type of a hickle >= 4 node whose type is a bare reference to a :data:`PLAIN_TYPES` type."""
    try:
        typed = node_type(f, node)
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} has a malformed type ({e})") from None
    if typed is None or typed[1] == "pickle":  # hickle >= 4 writes pickled objects without a type, or as 'pickle'
        raise _pickled(path, node.name)
    raw, base = typed
    try:
        module, name = referenced_global(raw)
    except UncheckablePickle as why:
        raise UnsafeHickleError(f"hickle file '{path}': the type of node {node.name!r} is {why}; refusing to load "
                                "it") from None
    if (module, name) not in PLAIN_TYPES:
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} has type '{module}.{name}', a pickled "
                                "global that is not a plain array/dict/list type; refusing to load it")
    return base


def _dict_key(name: str, node: Any, path: Path | str) -> str:
    kind = text(node.attrs.get("key_base_type", b"str"))
    if kind != "str":
        raise UnsafeHickleError(f"hickle file '{path}': dict key {name!r} has type {kind!r}; only str keys are read")
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'" else name


def _read_v4(f: h5py.File, node: Any, path: Path | str) -> Any:
    base = _plain_base_type(f, node, path)
    if base == "dict":
        if not isinstance(node, h5py.Group):
            raise UnsafeHickleError(f"hickle file '{path}': dict node {node.name!r} is not a group")
        return {_dict_key(name, child, path): _read_v4(f, child, path)
                for name, child in ((n, hard_child(node, n, path)) for n in node)}
    if base in _ARRAY_BASES:
        return _numeric(node, path)
    raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} holds a {base!r} object; {_READABLE}")


def _read_v3(node: Any, path: Path | str) -> Any:
    kind = text(node.attrs.get("type", b"pickle"))
    if kind == "pickle":
        raise _pickled(path, node.name)
    if kind in _V3_DICT_TYPES and isinstance(node, h5py.Group):
        out = {}
        for name in node:
            item = hard_child(node, name, path)
            inner = hard_child(item, "data_0", path) if isinstance(item, h5py.Group) else None
            if text(item.attrs.get("type", b"")) != "dict_item" or inner is None:
                raise UnsafeHickleError(f"hickle file '{path}': dict entry {item.name!r} is malformed")
            out[_dict_key(name, item, path)] = _read_v3(inner, path)
        return out
    if kind in _V3_ARRAY_TYPES:
        return _numeric(node, path)
    raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} holds a {kind!r} object; {_READABLE}")


def read_data(f: h5py.File, path: Path | str) -> Any:
    """The arrays of the open hickle (v3, v4, v5) or plain HDF5 file ``f``: an array, a dict of them (nested dicts
    stay dicts), or a plain file's root datasets by name. UnsafeHickleError for anything but numeric data."""
    if "HICKLE_VERSION" in f.attrs:
        node = hard_child(f, "data", path)
        if node is None:
            raise ConfigError(f"hickle file '{path}' has no 'data' node")
        return _read_v4(f, node, path)
    if text(f.attrs.get("CLASS", b"")) == "hickle":
        node = hard_child(f, "data_0", path)
        if node is None:
            raise ConfigError(f"hickle v3 file '{path}' has no 'data_0' node")
        return _read_v3(node, path)
    out = {name: _numeric(hard_child(f, name, path), path) for name in f}
    if not out:
        raise ConfigError(f"HDF5 file '{path}' holds no datasets")
    return out
