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
<class 'theanompi.nn.layers.dense.DenseLayer'>
"""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

from theanompi.core.module_alias import AliasFinder

__all__ = ["install", "installed", "uninstall"]

log = logging.getLogger(__name__)

ALIAS = "lasagne"
TARGET = "theanompi.lasagne"


def _on_load(alias: str, module: types.ModuleType) -> None:
    if alias == ALIAS:
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


class LasagneAliasFinder(AliasFinder):
    """Finds ``lasagne[.X]`` as ``theanompi.lasagne[.X]`` (placed last on ``sys.meta_path`` by :func:`install`)."""

    def __init__(self) -> None:
        super().__init__({ALIAS: TARGET}, on_load=_on_load)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != ALIAS and sys.modules.get(ALIAS) is not sys.modules.get(TARGET):
            return None  # a real Lasagne is loaded: its submodules are not ours to give
        return super().find_spec(fullname, path, target)


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
