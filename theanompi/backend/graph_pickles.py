"""What a pickle of a compiled pytensor graph may name: the safe loader's allow-list for the caches' pickles.

The caches hold pickles: the function store's entries
(:mod:`theanompi.backend.function_store`) and pytensor's ``key.pkl`` of every C
module (read by :mod:`theanompi.backend.module_preload`). They are trusted because
of where they live -- a directory only this user can write
(:func:`theanompi.backend.pytensor_config.cache_root`; otherwise the caches are
off). On top of that, :func:`graph_unpickler` reads them with the safe loader's
:class:`~theanompi.core.safe_load.RestrictedUnpickler`, resolving only what a
compiled graph is made of: the classes and functions that pytensor, theanompi and
the packages of the graph's own ops define (:data:`GRAPH_PACKAGES`), numpy's
arrays, scalars and ufuncs, and a few builtins (:data:`GRAPH_GLOBALS`). A pickle
naming anything else -- ``os.system``, ``eval``, ``subprocess.run`` -- is refused
before it runs, and the function is compiled again. This narrows what a planted
entry could do; it does not replace the directory's trust (pytensor itself
defines functions that run a compiler).

Example
-------
>>> import io, os, pickle, pytensor.tensor as pt
>>> x = pt.vector("x")
>>> print(graph_unpickler(io.BytesIO(pickle.dumps(pt.exp(x)))).load())
Exp.0
>>> graph_unpickler(io.BytesIO(pickle.dumps(os.system)), source="evil.pkl").load()
Traceback (most recent call last):
theanompi.core.safe_load.errors.UnsafePickleError: refusing to unpickle 'evil.pkl': ... 'posix.system' ...
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from theanompi.core.safe_load import SAFE_GLOBALS, RestrictedUnpickler
from theanompi.core.safe_load.pickles import ENUM_MEMBER, ReadableBinary

#: the packages whose classes and functions a compiled graph's pickle may always name
GRAPH_PACKAGES = ("pytensor", "theanompi")
#: and the other globals it may name: plain data (:data:`~theanompi.core.safe_load.SAFE_GLOBALS`), protocol 5's
#: arrays, numpy's ufuncs, builtins' exception types (an ``Assert`` op holds one), slices and paths, and enum members
#: as some Pythons write them (:data:`~theanompi.core.safe_load.pickles.ENUM_MEMBER`: pytensor's assumptions)
GRAPH_GLOBALS = frozenset(
    SAFE_GLOBALS | {ENUM_MEMBER}
    | {(module, "_frombuffer") for module in ("numpy.core.numeric", "numpy._core.numeric")}
    | {("numpy", name) for name, value in vars(np).items() if isinstance(value, np.ufunc)}
    | {("builtins", name) for name, value in vars(builtins).items()
       if isinstance(value, type) and issubclass(value, BaseException)}
    | {("builtins", "slice"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("copyreg", "_reconstructor"),
       ("collections", "OrderedDict")}
)


def graph_unpickler(file: ReadableBinary, source: str = "<pickle>", packages: Iterable[str] = (),
                    references: Mapping[Any, Any] | None = None) -> RestrictedUnpickler:
    """An unpickler of ``file`` that resolves only :data:`GRAPH_GLOBALS` and what :data:`GRAPH_PACKAGES` and
    ``packages`` (those of the graph being compiled: :func:`theanompi.backend.graph_signature.graph_packages`)
    define; ``references`` are the objects its persistent ids stand for."""
    return RestrictedUnpickler(file, source=source, allowed=GRAPH_GLOBALS,
                               packages=sorted({*GRAPH_PACKAGES, *packages}), references=references)
