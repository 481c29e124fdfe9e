"""``import lasagne`` gives :mod:`theanompi.lasagne` where the real Lasagne is not installed.

:func:`install` appends an import finder to the END of ``sys.meta_path``: it
is asked only after every ordinary finder has failed to find ``lasagne``, so
an importable Lasagne always wins. It maps ``lasagne`` and ``lasagne.X...``
to the already importable ``theanompi.lasagne`` and ``theanompi.lasagne.X...``
(the same module objects, registered in ``sys.modules`` under both names).
The first time it does so it logs, once, at INFO. An installed Lasagne that
fails to import (it needs theano) is still found first: its ImportError is
what ``import lasagne`` raises then (uninstall it to use this package).

Example
-------
>>> from theanompi import lasagne_alias as alias
>>> alias.install()                                   # doctest: +SKIP
>>> import lasagne                                    # doctest: +SKIP
>>> lasagne.layers.DenseLayer                         # doctest: +SKIP
<class 'theanompi.models.layers.dense.DenseLayer'>
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import types

__all__ = ["install", "installed", "uninstall"]

log = logging.getLogger(__name__)

ALIAS = "lasagne"
TARGET = "theanompi.lasagne"


def _target_name(fullname: str) -> str | None:
    """``theanompi.lasagne[.X]`` for ``lasagne[.X]``; None for other names."""
    if fullname == ALIAS or fullname.startswith(ALIAS + "."):
        return TARGET + fullname[len(ALIAS):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Gives the import of ``lasagne[.X]`` the module object ``theanompi.lasagne[.X]``."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system stamped the alias's spec on the module; give it back its own.
        module.__spec__ = self._own_spec
        if self.target == TARGET:
            log.info("lasagne is not installed: `import lasagne` gives theanompi.lasagne")
            _register_loaded_submodules()


def _register_loaded_submodules() -> None:
    """Make ``lasagne.X`` of every loaded ``theanompi.lasagne.X`` the same module object in ``sys.modules``.

    Otherwise ``import lasagne.layers`` would be found by the ordinary path
    finder in ``theanompi.lasagne.__path__`` and load the file a second time.
    """
    for name, module in list(sys.modules.items()):
        if name.startswith(TARGET + ".") and module is not None:
            sys.modules.setdefault(ALIAS + name[len(TARGET):], module)


class LasagneAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``lasagne[.X]`` as ``theanompi.lasagne[.X]`` (placed last on ``sys.meta_path`` by :func:`install`)."""

    def find_spec(self, fullname, path=None, target=None):
        target_name = _target_name(fullname)
        if target_name is None:
            return None
        if fullname != ALIAS and sys.modules.get(ALIAS) is not sys.modules.get(TARGET):
            return None  # a real Lasagne is loaded: its submodules are not ours to give
        try:
            target_spec = importlib.util.find_spec(target_name)
        except ModuleNotFoundError:
            return None
        if target_spec is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name),
                                              is_package=target_spec.submodule_search_locations is not None)


def installed() -> bool:
    """Whether the finder is on ``sys.meta_path``.

    Example
    -------
    >>> isinstance(installed(), bool)
    True
    """
    return any(isinstance(finder, LasagneAliasFinder) for finder in sys.meta_path)


def install() -> None:
    """Let ``import lasagne`` give :mod:`theanompi.lasagne` where no real Lasagne is importable; idempotent."""
    if not installed():
        sys.meta_path.append(LasagneAliasFinder())


def uninstall() -> None:
    """Remove the finder (modules already imported as ``lasagne`` stay in ``sys.modules``)."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, LasagneAliasFinder)]
