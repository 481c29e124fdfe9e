"""A disk cache of compiled pytensor functions, keyed by the structure of their graphs.

``pytensor.function`` spends most of a warm compile (the C modules already built)
rewriting the graph: ~10 s of ResNet-20's 12.5 s per rank, every rank, every run.
:func:`cached_function` compiles like ``pytensor.function`` and keeps the rewritten
function (its ``FunctionMaker``) in the store; the next process that builds the same
graph loads it and only links the C thunks. Two halves:

* :mod:`theanompi.backend.graph_signature` -- the key: a SHA-256 of the graph's
  structure (nodes, constants, inputs, shared variables, outputs, updates) and of
  the versions and settings compilation depends on; a graph it cannot describe
  exactly (Scan's inner graph, ...) is compiled as usual and not cached;
* :mod:`theanompi.backend.function_store` -- the entries on disk, their trust
  (a private directory, regular files of the user's, the key in each entry), the
  pickles bound to the graph's own shared variables, pruning.

Only C-backend functions are cached (``mode=None``). An entry of another graph, of
an older format, damaged, or naming a global the safe loader refuses is compiled
again and replaced, with a warning naming it; a directory, FIFO or link in an
entry's place is left alone and the function compiled without the cache.
``THEANOMPI_FUNCTION_CACHE=off`` turns it off.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> w = pytensor.shared(np.float32(2.0), name="w")
>>> x = pt.scalar("x", dtype="float32")
>>> f = cached_function([x], [x * w], updates=[(w, w + 1)])
>>> float(f(np.float32(3.0))[0]), float(w.get_value())
(6.0, 3.0)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pytensor

from theanompi.backend.function_store import (
    StaleEntry,
    UnusableEntry,
    cache_dir,
    read_entry,
    store_function,
    unpickle_function,
)
from theanompi.backend.graph_signature import Uncacheable, graph_packages, graph_signature
from theanompi.backend.march_flags import use_remembered_march_flags
from theanompi.backend.module_preload import module_dirs, preload_modules
from theanompi.backend.pytensor_config import FUNCTION_CACHE_ENV

log = logging.getLogger(__name__)


def is_enabled() -> bool:
    """False when ``THEANOMPI_FUNCTION_CACHE`` is off/0/false/no (as it is when the cache directory is refused)."""
    return os.environ.get(FUNCTION_CACHE_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def cached_function(inputs: Sequence, outputs, updates=None, mode=None, trust_input: bool = False):
    """``pytensor.function(inputs, outputs, updates=..., mode=..., trust_input=...)``, through the cache.

    Only the C backend (``mode=None``) is cached; other modes, a disabled cache and
    uncacheable graphs compile as usual.
    """
    def compile_here():
        return pytensor.function(list(inputs), outputs, updates=updates, mode=mode, trust_input=trust_input)

    if mode is not None:
        return compile_here()
    use_remembered_march_flags()  # skips pytensor's ~0.4 s g++ probe in every process
    if not is_enabled():
        return compile_here()
    outs = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
    try:
        key, shared = graph_signature(list(inputs), outs, updates)
    except Uncacheable as why:
        log.debug("function cache: not cached: %s", why)
        return compile_here()
    path = cache_dir() / f"{key}{'-trusted' if trust_input else ''}.pkl"
    try:
        fn = _from_cache(path, shared, len(inputs), graph_packages(outs, updates))
    except UnusableEntry as why:
        log.warning("function cache: %s is not used (%s); compiling without the cache", path, why)
        return compile_here()
    if fn is not None:
        return fn
    fn = compile_here()
    try:
        store_function(path, fn.maker, shared, module_dirs(fn))
    except OSError as err:
        log.warning("function cache: cannot write %s (%s)", path, err)
    return fn


def _from_cache(path: Path, shared: list, n_inputs: int, packages: frozenset[str]):
    """The function stored in ``path``, bound to ``shared``; None when there is none, or when the entry is stale,
    damaged or names a global the safe loader refuses (it is replaced then). :class:`UnusableEntry` for an entry
    that must not be read. ``packages``: those of the graph's ops (:func:`graph_packages`)."""
    try:
        blob = read_entry(path, path.stem)
    except StaleEntry as why:
        log.warning("function cache: cannot use %s (%s); compiling", path, why)
        return None
    if blob is None:
        return None
    try:
        maker, modules = unpickle_function(blob, shared, packages, source=str(path))
        if len(maker.inputs) - sum(1 for i in maker.inputs if i.shared) != n_inputs:
            raise ValueError("the stored function has other inputs")
        usable = preload_modules(modules, packages)  # pytensor then skips reading its whole compile directory
        fn = maker.create()
        if usable < len(modules):  # a module was removed or replaced: store the ones used now
            try:
                store_function(path, fn.maker, shared, module_dirs(fn))
            except OSError as err:
                log.warning("function cache: cannot update %s (%s)", path, err)
        os.utime(path)  # recently used: kept longest
        return fn
    except Exception as err:  # a damaged entry: compile again and replace it
        log.warning("function cache: cannot use %s (%s); compiling", path, err)
        path.unlink(missing_ok=True)
        return None
