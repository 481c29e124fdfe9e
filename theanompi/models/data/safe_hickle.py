"""Reading hickle/HDF5 files without unpickling anything (the batch files and mean/labels files of
:mod:`theanompi.models.data.hickle_batches`).

``hickle.load`` unpickles the type table every hickle >= 4 file carries and any
object hickle could not map, so it is never called: :func:`read_hickle` walks the
HDF5 structure with h5py and reads only numeric datasets (hickle 4/5 arrays,
lists and dicts of them, hickle 3 arrays and dicts, plain HDF5 datasets). Type
entries are checked *as bytes* (:mod:`pickletools`, nothing is unpickled) to name
only plain types; a pickled node, a non-numeric dataset or a link to another file
raises :class:`UnsafeHickleError`.

Example
-------
>>> import numpy as np, h5py, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "one.h5")
>>> with h5py.File(path, "w") as f:
...     _ = f.create_dataset("data", data=np.arange(3))
>>> read_hickle(path)
{'data': array([0, 1, 2])}
"""

from __future__ import annotations

import pickletools
from pathlib import Path

import numpy as np

from theanompi.core.errors import ConfigError

#: Types a hickle type-table entry may name (checked statically, never unpickled).
ALLOWED_TYPE_GLOBALS = {
    ("numpy", "ndarray"), ("builtins", "dict"), ("builtins", "list"), ("builtins", "tuple"),
    ("builtins", "int"), ("builtins", "float"),
}
#: hickle base types read as numeric arrays, and the one read as a dict.
_ARRAY_BASES = {"ndarray", "list", "tuple", "int", "float"}
_V3_ARRAY_TYPES = {"ndarray", "<class 'list'>", "<type 'list'>", "<class 'tuple'>", "<type 'tuple'>"}
_V3_DICT_TYPES = {"<class 'dict'>", "<type 'dict'>"}
_TYPE_PICKLE_OPS = {"PROTO", "FRAME", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "MEMOIZE",
                    "BINPUT", "LONG_BINPUT", "PUT", "STACK_GLOBAL", "GLOBAL", "STOP"}


class UnsafeHickleError(ConfigError):
    """A hickle/HDF5 file carries a pickled object or other content that is not plain numeric data."""


# ----- safe hickle reading ----------------------------------------------------------------
def _text(value) -> str:
    if isinstance(value, np.ndarray):
        value = value.ravel()[0] if value.size else b""
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _check_type_pickle(raw: bytes, path: Path, where: str) -> None:
    """Refuse a hickle type entry unless it is a bare reference to an allowed type (no unpickling)."""
    strings, found = [], []
    try:
        for op, arg, _ in pickletools.genops(raw):
            if op.name not in _TYPE_PICKLE_OPS:
                raise UnsafeHickleError(f"hickle file '{path}': the type of node {where!r} is a pickle that "
                                        f"runs opcode {op.name}; refusing to load it")
            if isinstance(arg, str) and op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                strings.append(arg)
            elif op.name == "GLOBAL":
                found.append(tuple(str(arg).split(" ", 1)))
            elif op.name == "STACK_GLOBAL":
                found.append(tuple(strings[-2:]))
    except UnsafeHickleError:
        raise
    except Exception as e:
        raise UnsafeHickleError(f"hickle file '{path}': the type of node {where!r} is not a readable type "
                                f"reference ({e})") from None
    if len(found) != 1 or found[0] not in ALLOWED_TYPE_GLOBALS:
        name = ", ".join(".".join(g) for g in found) or "nothing"
        raise UnsafeHickleError(f"hickle file '{path}': node {where!r} has type {name!r}, a pickled global that "
                                "is not a plain array/dict/list type; refusing to load it")


def _pickled(path: Path, where: str) -> UnsafeHickleError:
    return UnsafeHickleError(f"hickle file '{path}' carries a pickled Python object at node {where!r} "
                             "(hickle pickles objects of types it does not know); refusing to load it")


def _hard_child(group, name: str, path: Path):
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    link = group.get(name, getlink=True)
    if link is None:
        return None
    if not isinstance(link, h5py.HardLink):
        raise UnsafeHickleError(f"hickle file '{path}': node {name!r} in {group.name!r} is a "
                                f"{type(link).__name__}; only data stored in the file itself is read")
    return group[name]


def _numeric(node, path: Path) -> np.ndarray:
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    if not isinstance(node, h5py.Dataset):
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} is a group where an array was expected")
    if node.dtype.kind not in "biuf" or node.dtype.fields is not None:
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} holds non-numeric data "
                                f"(dtype {node.dtype}), e.g. a pickled object; only numeric arrays are read")
    return np.asarray(node[()])


def _v4_base_type(f, node, path: Path) -> str:
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    attrs = node.attrs
    if "type" not in attrs:
        raise _pickled(path, node.name)  # hickle >= 4 writes pickled objects without a 'type'
    t = attrs["type"]
    try:
        if isinstance(t, h5py.Reference):
            entry = f[t]
            raw = np.asarray(entry[()]).tobytes()
            base = entry.attrs.get("base_type")
            base = f[base].name.rsplit("/", 1)[-1] if isinstance(base, h5py.Reference) else _text(base)
        else:  # hickle 4.0: the pickled type in the attribute itself
            raw = np.asarray(t).tobytes()
            base = _text(attrs.get("base_type", b"pickle"))
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} has a malformed type ({e})") from None
    if base == "pickle":
        raise _pickled(path, node.name)
    _check_type_pickle(raw, path, node.name)
    return base


def _dict_key(name: str, node, path: Path) -> str:
    kind = _text(node.attrs.get("key_base_type", b"str"))
    if kind != "str":
        raise UnsafeHickleError(f"hickle file '{path}': dict key {name!r} has type {kind!r}; only str keys are read")
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'" else name


def _read_v4_node(f, node, path: Path):
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    base = _v4_base_type(f, node, path)
    if base == "dict":
        if not isinstance(node, h5py.Group):
            raise UnsafeHickleError(f"hickle file '{path}': dict node {node.name!r} is not a group")
        return {_dict_key(name, child, path): _read_v4_node(f, child, path)
                for name, child in ((n, _hard_child(node, n, path)) for n in node)}
    if base in _ARRAY_BASES:
        return _numeric(node, path)
    raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} holds a {base!r} object; only arrays, "
                            "lists of numbers and dicts of them are read")


def _read_v3_node(node, path: Path):
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    kind = _text(node.attrs.get("type", b"pickle"))
    if kind == "pickle":
        raise _pickled(path, node.name)
    if kind in _V3_DICT_TYPES and isinstance(node, h5py.Group):
        out = {}
        for name in node:
            item = _hard_child(node, name, path)
            inner = _hard_child(item, "data_0", path) if isinstance(item, h5py.Group) else None
            if _text(item.attrs.get("type", b"")) != "dict_item" or inner is None:
                raise UnsafeHickleError(f"hickle file '{path}': dict entry {item.name!r} is malformed")
            out[_dict_key(name, item, path)] = _read_v3_node(inner, path)
        return out
    if kind in _V3_ARRAY_TYPES:
        return _numeric(node, path)
    raise UnsafeHickleError(f"hickle file '{path}': node {node.name!r} holds a {kind!r} object; only arrays, "
                            "lists of numbers and dicts of them are read")


def read_hickle(path):
    """The arrays of a hickle (v3, v4, v5) or plain HDF5 file, without unpickling anything.

    Returns
    -------
    ndarray or dict of str -> ndarray
        A file holding one array gives the array; a dict gives a dict (nested
        dicts stay dicts); a plain HDF5 file gives its root datasets by name.

    Raises
    ------
    ConfigError
        The path is missing or not an HDF5 file.
    UnsafeHickleError
        The file carries a pickled object or anything but numeric data.

    Example
    -------
    >>> import hickle, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "b.hkl")
    >>> hickle.dump({"data": np.zeros((2, 3), np.uint8), "labels": [4, 5]}, p)
    >>> d = read_hickle(p)
    >>> sorted(d), d["labels"].tolist()
    (['data', 'labels'], [4, 5])
    """
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"hickle file '{path}' does not exist")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ConfigError(f"'{path}' is not a hickle/HDF5 file ({e})") from None
    with f:
        attrs = f.attrs
        if "HICKLE_VERSION" in attrs:
            node = _hard_child(f, "data", path)
            if node is None:
                raise ConfigError(f"hickle file '{path}' has no 'data' node")
            return _read_v4_node(f, node, path)
        if _text(attrs.get("CLASS", b"")) == "hickle":
            node = _hard_child(f, "data_0", path)
            if node is None:
                raise ConfigError(f"hickle v3 file '{path}' has no 'data_0' node")
            return _read_v3_node(node, path)
        out = {}
        for name in f:
            node = _hard_child(f, name, path)
            out[name] = _numeric(node, path)
        if not out:
            raise ConfigError(f"HDF5 file '{path}' holds no datasets")
        return out


def read_array(path, what: str) -> np.ndarray:
    """One array from ``.npy`` (never pickled objects) or a hickle/HDF5 file holding a single array."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} '{path}' does not exist")
    if path.suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as e:
            raise ConfigError(f"{what} '{path}' is not a plain numeric .npy array ({e})") from None
    content = read_hickle(path)
    if isinstance(content, dict):
        if len(content) != 1:
            raise ConfigError(f"{what} '{path}' holds a dict with keys {sorted(content)}; expected one array")
        content = next(iter(content.values()))
    return content
