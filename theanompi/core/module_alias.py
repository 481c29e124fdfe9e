"""Import aliases: ``import old.name`` gives the module object of ``new.name`` (the same object, not a copy).

One finder, :class:`AliasFinder`, maps aliases to targets: an entry ``"old": "new"`` makes ``old`` and every
module under it (``old.X`` -> ``new.X``) the target's; an entry ``"old.*": "new.*"`` maps only the modules under
``old``; where several entries match a name, the longest wins (``lasagne[.X]`` -> ``theanompi.lasagne[.X]``;
``theanompi.models.layers`` -> ``theanompi.nn`` but ``theanompi.models.layers.X`` -> ``theanompi.nn.layers.X``).
:func:`install` places it at the END of ``sys.meta_path``, where it is asked only after every ordinary finder has
failed, so a real module of the alias's name always wins; ``first=True`` places it at the front, for paths no real
module may hold any more: there, the path finder would otherwise load a second copy of ``old.X`` from the target
package's directory (``old`` is the target itself), or import a moved package's old directory, left behind with
only ``__pycache__`` in it, as an empty namespace package. ``python -m ALIAS`` runs the target's code as ``__main__``.
Users: :mod:`theanompi.lasagne_alias` (``import lasagne``) and ``theanompi``'s table of moved paths.

Example
-------
>>> import sys
>>> finder = AliasFinder({"json_alias_demo": "json"})
>>> sys.meta_path.append(finder)
>>> import json_alias_demo, json
>>> json_alias_demo is json, finder.target_name("json_alias_demo.decoder")
(True, 'json.decoder')
>>> sys.meta_path.remove(finder); del sys.modules["json_alias_demo"]
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any


class AliasLoader(importlib.abc.Loader):
    """Gives the import of an alias the already importable module ``target``."""

    def __init__(self, target: str, on_load: Callable[[str, types.ModuleType], None] | None = None):
        self.target = target
        self.on_load = on_load
        self._own_spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        alias = module.__spec__.name if module.__spec__ else self.target
        module.__spec__ = self._own_spec  # the import system stamped the alias's spec on it: give it back its own
        if self.on_load is not None:
            self.on_load(alias, module)

    def get_code(self, fullname: str) -> types.CodeType | None:
        """The target's code (``python -m ALIAS`` runs it as ``__main__``)."""
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec else None
        get_code = getattr(loader, "get_code", None)
        return get_code(self.target) if get_code else None


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds each alias of ``aliases`` (alias -> target) as its target, and the modules under it under the target;
    ``"old.*": "new.*"`` entries map only the modules under ``old``; the longest matching entry wins.

    ``on_load(alias, module)`` runs once per alias imported (e.g. to log or warn).
    """

    def __init__(self, aliases: Mapping[str, str],
                 on_load: Callable[[str, types.ModuleType], None] | None = None):
        self.aliases = dict(aliases)
        self.on_load = on_load

    def match(self, name: str) -> tuple[str, str] | None:
        """``(old, new)``: the prefix of the dotted ``name`` (a module, or a name in one) that the longest matching
        entry maps, and what it maps it to; None when no entry matches.

        Example
        -------
        >>> finder = AliasFinder({"a": "x", "a.*": "y.*", "a.b": "z"})
        >>> finder.match("a"), finder.match("a.c.D"), finder.match("a.b.E"), finder.match("ab")
        (('a', 'x'), ('a.', 'y.'), ('a.b', 'z'), None)
        """
        best: tuple[str, str] | None = None
        for alias, target in self.aliases.items():
            if alias.endswith(".*"):
                old, new = alias[:-1], target.removesuffix("*")
                found = name.startswith(old)
            else:
                old, new = alias, target
                found = name == old or name.startswith(old + ".")
            if found and (best is None or len(old) > len(best[0])):
                best = (old, new)
        return best

    def target_name(self, fullname: str) -> str | None:
        """The target of ``fullname``, or None when it is no alias of this finder.

        >>> AliasFinder({"a": "x", "a.*": "y.*"}).target_name("a.c.D")
        'y.c.D'
        """
        found = self.match(fullname)
        return None if found is None else found[1] + fullname[len(found[0]):]

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        target_name = self.target_name(fullname)
        if target_name is None:
            return None
        try:
            target_spec = importlib.util.find_spec(target_name)
        except ModuleNotFoundError:
            return None
        if target_spec is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, AliasLoader(target_name, self.on_load),
                                              is_package=target_spec.submodule_search_locations is not None)


def warn_moved(alias: str, module: types.ModuleType) -> None:
    """``on_load`` of moved paths: a DeprecationWarning naming the module's path now."""
    warnings.warn(f"{alias} is now {module.__name__}; import it from there", DeprecationWarning, stacklevel=3)


def install(finder: AliasFinder, first: bool = False) -> AliasFinder:
    """Put ``finder`` at the end of ``sys.meta_path`` (at its front with ``first``) unless a finder of its class
    with the same aliases is there already; returns the finder in use."""
    for existing in sys.meta_path:
        if type(existing) is type(finder) and getattr(existing, "aliases", None) == finder.aliases:
            return existing
    sys.meta_path.insert(0 if first else len(sys.meta_path), finder)
    return finder
