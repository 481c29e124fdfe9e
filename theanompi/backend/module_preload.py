"""Hand pytensor the C modules a cached function needs, so it does not read its whole compile directory.

The first time a process looks up a C module, pytensor's ``ModuleCache`` reads the
``key.pkl`` of *every* module in the compile directory, holding the directory's lock
while it does. That takes ~1 ms per module: ~1 s per rank for a directory of
~1,000 modules (the test suite's), and ranks that start together wait for each
other's turn at the lock. A function loaded from :mod:`theanompi.backend.function_cache`
already knows which modules its thunks use (:func:`module_dirs`, stored with it), so
:func:`preload_modules` reads only their ``key.pkl`` files (with the safe loader: what a
compiled graph names, :mod:`theanompi.backend.graph_pickles`), registers them in
pytensor's module cache as its own refresh would, and creates that cache without
the full refresh if no one has created it yet.

Anything unexpected (a module removed meanwhile, an unreadable key, a module older
than pytensor's age limit) skips that one module: pytensor then misses it and falls
back to its usual full refresh, so the result is the same, only slower, and the
function cache stores the function's current modules again. pytensor's clean-up of
its directory (broken, empty and duplicate entries; modules unused for weeks) needs
the whole directory read: a process that read it anyway cleans up at exit, as
pytensor's own processes do; one that did not leaves it to the next that does.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> x = pt.vector("x", dtype="float32")
>>> f = pytensor.function([x], pt.exp(x) * 2)
>>> dirs = module_dirs(f)
>>> len(dirs) >= 1 and all("/" not in d for d in dirs)
True
>>> preload_modules(dirs) == len(dirs)        # already known to this process: nothing to read
True
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from collections.abc import Iterable

import pytensor
from pytensor.link.c import cmodule

from theanompi.backend.graph_pickles import graph_unpickler
from theanompi.core.no_follow import open_regular

log = logging.getLogger(__name__)


def module_dirs(fn) -> list[str]:
    """The compile-directory entries (directory names) of the C modules ``fn``'s thunks run."""
    compiledir = os.path.realpath(pytensor.config.compiledir)
    found = []
    for thunk in getattr(fn.vm, "thunks", ()):
        module = getattr(getattr(thunk, "thunk", None), "module", None)
        path = getattr(module, "__file__", None)
        if path is None:
            continue
        entry_dir = os.path.dirname(os.path.realpath(path))
        if os.path.dirname(entry_dir) == compiledir and os.path.basename(entry_dir) not in found:
            found.append(os.path.basename(entry_dir))
    return found


def _module_cache_without_refresh():
    """pytensor's module cache; created here without the full refresh when it does not exist yet."""
    if cmodule._module_cache is None:
        cache = cmodule.ModuleCache(pytensor.config.compiledir, do_refresh=False)
        cmodule._module_cache = cache
        atexit.register(_clean_up_if_refreshed, cache)
    return cmodule._module_cache


def _clean_up_if_refreshed(cache) -> None:
    """pytensor's clean-up (its first refresh's and its exit-time one), when this process has read the
    whole directory anyway."""
    if getattr(cache, "_theanompi_preloaded", 0) < len(cache.loaded_key_pkl):
        cache.refresh(cleanup=True)
        cache._on_atexit()


def _register(cache, root: str, packages: tuple[str, ...]) -> bool:
    """Register the module in ``root`` as ``ModuleCache.refresh`` would; False if it is not usable (its key names
    a global beyond what :func:`graph_unpickler` resolves with ``packages``, too)."""
    from pytensor.link.c.cmodule import (  # noqa: PLC0415 - pytensor internals: preload_modules catches a move
        KeyData,
        get_safe_part,
        last_access_time,
        module_name_from_dir,
    )

    key_pkl = os.path.join(root, "key.pkl")
    try:
        entry = module_name_from_dir(root)
        if time.time() - last_access_time(entry) >= cache.age_thresh_use:
            return False  # pytensor no longer uses it (and may delete it)
        with os.fdopen(open_regular(key_pkl, "module key", root=root), "rb") as f:  # never through a link
            key_data = graph_unpickler(f, source=key_pkl, packages=packages).load()
    except Exception as err:  # as pytensor's refresh: an unreadable entry is skipped
        log.debug("module preload: skipping %s (%s)", root, err)
        return False
    if not isinstance(key_data, KeyData) or key_data.get_entry() != entry:
        return False
    if not key_data.keys or not all(key[0] for key in key_data.keys):  # unversioned keys are not shared
        return False
    if key_data.module_hash in cache.module_hash_to_key_data:
        return False  # a duplicate of a module already registered
    if any(key in cache.entry_from_key for key in key_data.keys):
        return False
    cache.module_hash_to_key_data[key_data.module_hash] = key_data
    for key in key_data.keys:
        cache.entry_from_key[key] = entry
        cache.similar_keys.setdefault(get_safe_part(key), []).append(key)
    cache.loaded_key_pkl.add(key_pkl)
    return True


def preload_modules(names: Iterable[str], packages: Iterable[str] = ()) -> int:
    """Register the modules in these compile-directory entries with pytensor; return how many it knows now.

    ``packages``: those of the function's ops besides pytensor and theanompi, whose classes its modules' keys name
    (:func:`theanompi.backend.graph_signature.graph_packages`).

    Fewer than ``len(names)`` means some entry was not usable (pytensor will look for those modules itself).

    It reaches into pytensor's ``ModuleCache`` (``entry_from_key`` and friends, as its ``refresh``
    fills them); should a pytensor release change those, it logs why and registers nothing, and
    pytensor finds the modules its own (slower) way.
    """
    try:
        return _preload(list(names), tuple(packages))
    except Exception as err:  # an internal of pytensor moved: fall back to pytensor's own lookup
        log.warning("module preload: pytensor's module cache is not what this version expects (%s: %s); "
                    "pytensor will read its whole compile directory", type(err).__name__, err)
        return 0


def _preload(names: list[str], packages: tuple[str, ...]) -> int:
    from pytensor.compile.compilelock import lock_ctx  # noqa: PLC0415 - internals: preload_modules catches a move

    cache = _module_cache_without_refresh()
    compiledir = str(pytensor.config.compiledir)
    roots = [os.path.join(compiledir, name) for name in names if name and "/" not in name and name != "lock_dir"]
    new_roots = [root for root in roots if os.path.join(root, "key.pkl") not in cache.loaded_key_pkl]
    added = 0
    if new_roots:
        with lock_ctx():  # as refresh: key.pkl files are written under this lock
            added = sum(_register(cache, root, packages) for root in new_roots)
        cache._theanompi_preloaded = getattr(cache, "_theanompi_preloaded", 0) + added
    return len(roots) - len(new_roots) + added
