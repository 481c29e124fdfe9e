"""Clear errors for Lasagne names that :mod:`theanompi.lasagne` does not provide.

Each module of the tree sets ``__getattr__ = unported_names(__name__, [...])``:
``lasagne.updates.adamax`` then raises an AttributeError saying that the name
is Lasagne's but not ported, instead of a bare "has no attribute".

Example
-------
>>> getattr_ = unported_names("theanompi.lasagne.updates", ["adamax"])
>>> getattr_("adamax")
Traceback (most recent call last):
...
AttributeError: lasagne.updates.adamax exists in Lasagne but is not ported to theanompi.lasagne; ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

PREFIX = "theanompi."


def unported_names(module_name: str, names: Iterable[str]) -> Callable[[str], object]:
    """A module ``__getattr__`` raising AttributeError that names Lasagne's missing ``names`` as such."""
    missing = frozenset(names)
    lasagne_name = module_name[len(PREFIX):] if module_name.startswith(PREFIX) else module_name

    def __getattr__(name: str):
        if name in missing:
            raise AttributeError(f"{lasagne_name}.{name} exists in Lasagne but is not ported to theanompi.lasagne; "
                                 f"dir({lasagne_name}) lists what is")
        raise AttributeError(f"module {lasagne_name!r} has no attribute {name!r}")

    return __getattr__
