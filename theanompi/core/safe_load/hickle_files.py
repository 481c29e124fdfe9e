"""Hickle files read without arbitrary unpickling: whole objects (checkpoints), or numeric data only (batch files).

hickle stores Python *types* (and objects it cannot map) as pickles, so a crafted
``.hkl`` file can run code on ``hickle.load``. Two readers, one reading of the file's
nodes (:mod:`theanompi.core.safe_load.hickle_nodes`):

* :func:`load_hickle` (checkpoints: dicts, lists, numbers, strings, arrays) reads
  only hickle 4/5 files (hickle reads v3 files with ``dill``), and first reads every
  pickle hickle would unpickle without unpickling it: one naming a global beyond
  plain containers, numbers, strings and numpy arrays/scalars (``os.system``, a user
  class, ...) is refused with :class:`UnsafeHickleError` naming the file and the
  global, before hickle reads the file. hickle then runs with a restricted unpickler
  that resolves only those globals, too.
* :func:`read_hickle` and :func:`read_array` (batch files, mean and label files)
  never call hickle: they read numeric datasets only (hickle 4/5 arrays, lists and
  dicts of them, hickle 3 arrays and dicts, plain HDF5 datasets), each node's type
  checked *as bytes* to name a plain type; a pickled node, a non-numeric dataset or a
  link to another file is refused.

h5py (~0.15 s to import) is imported when a file is read.

Example
-------
>>> import numpy as np, h5py, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "one.h5")
>>> with h5py.File(path, "w") as f:
...     _ = f.create_dataset("data", data=np.arange(3))
>>> read_hickle(path)
{'data': array([0, 1, 2])}
>>> load_hickle(path)
Traceback (most recent call last):
theanompi.core.errors.ConfigError: /tmp/.../one.h5: not a readable hickle file (no HICKLE_VERSION attribute)
"""

from __future__ import annotations

import os
import pickle
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import open_regular
from theanompi.core.safe_load.errors import UnsafeFileError, UnsafeHickleError
from theanompi.core.safe_load.pickles import restricted_loads

if TYPE_CHECKING:
    from _typeshed import StrPath

_HICKLE_LOCK = threading.Lock()  # hickle's module-level pickle is swapped while one load runs


@contextmanager
def _hickle_uses_restricted_pickle(source: str) -> Iterator[None]:
    import hickle.hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read
    import hickle.lookup  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    shim = types.SimpleNamespace(**{k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
    shim.loads = lambda data, **kw: restricted_loads(data, source)
    with _HICKLE_LOCK:
        saved = hickle.hickle.pickle, hickle.lookup.pickle
        hickle.hickle.pickle = hickle.lookup.pickle = shim
        try:
            yield
        finally:
            hickle.hickle.pickle, hickle.lookup.pickle = saved


@contextmanager
def _hdf5_file(path: Path, missing: str, unreadable: str) -> Iterator[Any]:
    """``path`` open with h5py for reading, through a descriptor of the regular file it is (a FIFO, a device or a
    link to one is refused: UnexpectedEntry); ConfigError ``missing`` if there is no such file, ``unreadable`` (with
    h5py's reason) if h5py cannot open it."""
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    try:
        fd = open_regular(path, "hickle file")
    except FileNotFoundError:
        raise ConfigError(missing) from None
    except OSError as err:
        raise ConfigError(f"{unreadable} ({err.strerror or err})") from None
    with os.fdopen(fd, "rb") as raw:
        try:
            f = h5py.File(raw, "r")
        except OSError as err:
            raise ConfigError(f"{unreadable} ({err})") from None
        with f:
            yield f


def load_hickle(path: StrPath) -> object:
    """``hickle.load`` of a hickle 4/5 file whose every pickle names only plain data; ConfigError for a missing
    or corrupt file, UnsafeHickleError for an unsafe one.

    Example
    -------
    >>> import collections, hickle, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.hkl")
    >>> hickle.dump({"epoch": 3}, path, mode="w")
    >>> load_hickle(path)
    {'epoch': 3}
    >>> hickle.dump({"epoch": 3, "order": collections.OrderedDict(a=1)}, path, mode="w")
    >>> load_hickle(path)
    Traceback (most recent call last):
    theanompi.core.safe_load.errors.UnsafeHickleError: refusing to unpickle ...: it references the global \
    'collections.OrderedDict' in the type of node '/data/"order"' (only containers, numbers, strings and numpy ...
    """
    from theanompi.core.safe_load.hickle_nodes import check_pickles  # noqa: PLC0415 - imports h5py

    path = Path(path)
    with _hdf5_file(path, f"{path}: no such file", f"{path}: not a readable hickle file") as f:
        check_pickles(f, path)
        return _load_checked(f, path)


def _load_checked(f: Any, path: Path) -> object:
    """``hickle.load`` of the open file ``f`` (its pickles checked), with the restricted unpickler."""
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    try:
        with _hickle_uses_restricted_pickle(str(path)):
            return hickle.load(f)  # the file checked, through the same descriptor
    except Exception as err:  # hickle wraps everything in ValueError; find our refusal in the chain
        cause: BaseException | None = err
        while cause is not None:
            if isinstance(cause, UnsafeFileError):
                raise UnsafeHickleError(str(cause)) from None
            wrapped = cause.args[1] if len(cause.args) > 1 and isinstance(cause.args[1], BaseException) else None
            cause = cause.__cause__ or wrapped
        raise ConfigError(f"{path}: not a readable hickle file ({type(err).__name__}: {str(err)[:200]})") from None


def read_hickle(path: StrPath) -> Any:
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
    from theanompi.core.safe_load.hickle_nodes import read_data  # noqa: PLC0415 - imports h5py

    path = Path(path)
    with _hdf5_file(path, f"hickle file '{path}' does not exist", f"'{path}' is not a hickle/HDF5 file") as f:
        return read_data(f, path)


def read_array(path: StrPath, what: str) -> np.ndarray:
    """One array from ``.npy`` (never pickled objects) or a hickle/HDF5 file holding a single array.

    Example
    -------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "mean.npy")
    >>> np.save(p, np.ones((3, 2, 2), np.float32))
    >>> read_array(p, "mean file").shape
    (3, 2, 2)
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise ConfigError(f"{what} '{path}' does not exist")
    if path.suffix == ".npy":
        f = os.fdopen(open_regular(path, what), "rb")  # a FIFO or a device is refused (UnexpectedEntry)
        try:
            with f:
                return np.asarray(np.load(f, allow_pickle=False))
        except ValueError as e:
            raise ConfigError(f"{what} '{path}' is not a plain numeric .npy array ({e})") from None
    content = read_hickle(path)
    if isinstance(content, dict):
        if len(content) != 1:
            raise ConfigError(f"{what} '{path}' holds a dict with keys {sorted(content)}; expected one array")
        content = next(iter(content.values()))
    return np.asarray(content)
