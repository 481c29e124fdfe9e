"""The one safe loader: every file theanompi reads that could carry code is read here, without running any of it.

A pickle can call anything it names, and hickle stores Python types (and objects
it cannot map) as pickles. Each reader says what it allows, as data:

* CIFAR-10 batches, MNIST's ``mnist.pkl.gz``: :func:`load_pickle` with
  :data:`NUMPY_ARRAY_GLOBALS` (numpy arrays in containers);
* checkpoints (hickle 4/5): :func:`load_hickle`, every pickle of the file checked
  against :data:`SAFE_GLOBALS` (plain data) before hickle reads it;
* hickle/HDF5 batch, mean and label files: :func:`read_hickle`, :func:`read_array`,
  numeric data only, nothing unpickled;
* the caches (the function store's entries, pytensor's module keys):
  :class:`RestrictedUnpickler` with what a compiled graph names
  (:mod:`theanompi.backend.graph_pickles`).

The package: :mod:`~theanompi.core.safe_load.errors` (the error family),
:mod:`~theanompi.core.safe_load.pickles` (the restricted unpickler, the allow-lists,
a pickle's globals read off its opcodes), :mod:`~theanompi.core.safe_load.hickle_nodes`
(a hickle file's nodes: their types, every pickle hickle would unpickle, their data),
:mod:`~theanompi.core.safe_load.hickle_files` (the two hickle readers).

Every refusal is an :class:`UnsafeFileError` (a ConfigError: one line naming the file
and the global or node): :class:`UnsafePickleError` from a pickle,
:class:`UnsafeHickleError` from a hickle/HDF5 file.

Example
-------
>>> import os, pickle, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "evil.pkl")
>>> with open(path, "wb") as f:
...     pickle.dump({"cmd": os.system}, f)
>>> try:
...     load_pickle(path, NUMPY_ARRAY_GLOBALS)
... except UnsafeFileError as err:
...     print(type(err).__name__, "...", str(err)[-80:])
UnsafePickleError ... 'posix.system' (only containers, numbers, strings and numpy arrays are allowed)
"""

from theanompi.core.safe_load.errors import UnsafeFileError, UnsafeHickleError, UnsafePickleError
from theanompi.core.safe_load.hickle_files import load_hickle, read_array, read_hickle
from theanompi.core.safe_load.pickles import (
    NUMPY_ARRAY_GLOBALS,
    SAFE_GLOBALS,
    RestrictedUnpickler,
    load_pickle,
    pickle_globals,
    restricted_loads,
)

__all__ = ["NUMPY_ARRAY_GLOBALS", "SAFE_GLOBALS", "RestrictedUnpickler", "UnsafeFileError", "UnsafeHickleError",
           "UnsafePickleError", "load_hickle", "load_pickle", "pickle_globals", "read_array", "read_hickle",
           "restricted_loads"]
