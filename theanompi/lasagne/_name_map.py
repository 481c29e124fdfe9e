"""How :mod:`theanompi.lasagne` turns its table into Lasagne's module tree.

:func:`build_tree` makes one module per entry of the table: ``theanompi.lasagne.X`` holds the public names
(``__all__``) of the :mod:`theanompi.nn` module that implements Lasagne's ``lasagne.X`` -- the same objects -- and
the few names only Lasagne has. It is registered in ``sys.modules`` (so ``import theanompi.lasagne.layers.pool``
and, through :mod:`theanompi.lasagne_alias`, ``import lasagne.layers.pool`` work) and set as an attribute of its
parent. Reading a name it lacks raises an AttributeError that speaks of Lasagne's name, and says so when the name
is Lasagne's but not ported (:func:`unported_names`); importing a module of Lasagne that is not provided raises an
ImportError with the reason (:class:`NotProvidedFinder`).

Example
-------
>>> import json, sys, types
>>> sys.modules["demo"] = types.ModuleType("demo")
>>> tree = build_tree("demo", {"decoder": json.decoder}, extra_names={"decoder": {"Error": ValueError}},
...                   unported={"decoder": ["scanstring"]}, not_provided={"decoder.fast": "is not provided"})
>>> import demo.decoder
>>> demo.decoder is tree["decoder"], demo.decoder.JSONDecoder is json.JSONDecoder, demo.decoder.Error is ValueError
(True, True, True)
>>> demo.decoder.scanstring
Traceback (most recent call last):
...
AttributeError: demo.decoder.scanstring exists in Lasagne but is not ported to theanompi.lasagne; ...
>>> import demo.decoder.fast
Traceback (most recent call last):
...
ImportError: demo.decoder.fast is not provided
>>> for name in ("demo", "demo.decoder"):
...     del sys.modules[name]
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Iterable, Mapping

PREFIX = "theanompi."


def lasagne_name(module_name: str) -> str:
    """The name Lasagne's users know: ``theanompi.lasagne.layers`` -> ``lasagne.layers``.

    >>> lasagne_name("theanompi.lasagne.layers.pool")
    'lasagne.layers.pool'
    """
    return module_name[len(PREFIX):] if module_name.startswith(PREFIX) else module_name


def unported_names(module_name: str, names: Iterable[str]) -> Callable[[str], object]:
    """A module ``__getattr__`` raising AttributeError that names Lasagne's missing ``names`` as such.

    >>> getattr_ = unported_names("theanompi.lasagne.updates", ["adamax"])
    >>> getattr_("adamax")
    Traceback (most recent call last):
    ...
    AttributeError: lasagne.updates.adamax exists in Lasagne but is not ported to theanompi.lasagne; ...
    >>> getattr_("adamx")
    Traceback (most recent call last):
    ...
    AttributeError: module 'lasagne.updates' has no attribute 'adamx'
    """
    missing = frozenset(names)
    name_of_module = lasagne_name(module_name)

    def __getattr__(name: str) -> object:
        if name in missing:
            raise AttributeError(f"{name_of_module}.{name} exists in Lasagne but is not ported to theanompi.lasagne; "
                                 f"dir({name_of_module}) lists what is")
        raise AttributeError(f"module {name_of_module!r} has no attribute {name!r}")

    return __getattr__


def lasagne_module(name: str, implementation: types.ModuleType, extra_names: Mapping[str, object],
                   unported: Iterable[str], is_package: bool) -> types.ModuleType:
    """The module ``name``: the public names of ``implementation`` and ``extra_names``, Lasagne's errors."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=is_package)
    module = importlib.util.module_from_spec(spec)
    module.__doc__ = (f"``{lasagne_name(name)}``: the names of :mod:`{implementation.__name__}`"
                      + (f" and {', '.join(sorted(extra_names))}" if extra_names else "") + ".")
    public = list(implementation.__all__)
    vars(module).update((attr, getattr(implementation, attr)) for attr in public)
    vars(module).update(extra_names)
    vars(module)["__all__"] = [*public, *extra_names]
    vars(module)["__getattr__"] = unported_names(name, unported)
    return module


class NotProvidedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds each module of ``reasons`` (full name -> why) and fails to load it with ImportError(why).

    ``importlib.util.find_spec`` finds it (as it would find a file that raises when imported); importing it raises.
    """

    def __init__(self, reasons: Mapping[str, str]):
        self.reasons = dict(reasons)

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in self.reasons else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        raise ImportError(self.reasons[spec.name], name=spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Never reached: :meth:`create_module` raises."""


def build_tree(package: str, modules: Mapping[str, types.ModuleType], extra_names: Mapping[str, Mapping[str, object]],
               unported: Mapping[str, Iterable[str]], not_provided: Mapping[str, str]) -> dict[str, types.ModuleType]:
    """Make, register and attach the module ``package.X`` of every ``X`` of ``modules`` (parents first); returns
    them by ``X``. ``not_provided`` (``X`` -> why) joins the finder of modules that raise ImportError when imported.
    """
    children = {name.rpartition(".")[0] for name in [*modules, *not_provided]}
    built: dict[str, types.ModuleType] = {}
    for name in sorted(modules, key=lambda n: n.count(".")):
        full = f"{package}.{name}"
        module = lasagne_module(full, modules[name], extra_names.get(name, {}), unported.get(name, ()),
                                is_package=name in children)
        sys.modules[full] = module
        parent, _, child = full.rpartition(".")
        setattr(sys.modules[parent], child, module)
        built[name] = module
    reasons = {f"{package}.{name}": f"{lasagne_name(package)}.{name} {why}" for name, why in not_provided.items()}
    finder = next((f for f in sys.meta_path if isinstance(f, NotProvidedFinder)), None)
    if finder is None:
        sys.meta_path.append(finder := NotProvidedFinder({}))
    finder.reasons.update(reasons)
    return built
