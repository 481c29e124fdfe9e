"""SessionOptions: a session's options as one typed, frozen object read by attribute.

The launcher resolves options into a plain dict (``SessionSpec.options``, saved as
JSON in ``session.json``); the rank side reads them through this object, built from
the same schema (:data:`theanompi.options.COMMON_OPTIONS` plus the rule's
``rule_options``). Every option of the schema is present, holding its schema default
when it was not given; a name outside the schema is refused. Readers write
``options.checkpoint_every``, never ``options.get("checkpoint_every", 0)``: the
default lives in the schema alone.

For code still written against the dict, the object is also a read-only mapping
(``options["seed"]``, ``options.get("seed")``, ``dict(options)``).

Example
-------
>>> options = SessionOptions.from_dict({"seed": "3", "compute": "C"})
>>> options.seed, options.compute, options.checkpoint_every
(3, 'c', 0)
>>> options.seed = 4
Traceback (most recent call last):
...
dataclasses.FrozenInstanceError: session options are frozen; cannot set 'seed'
>>> options.sede
Traceback (most recent call last):
...
AttributeError: session options have no option 'sede'
>>> SessionOptions.from_dict(options.to_dict()) == options
True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import FrozenInstanceError
from typing import Any

from theanompi.options import COMMON_OPTIONS, Option, resolve_options


class SessionOptions(Mapping):
    """A frozen name -> value view of one session's resolved options, read by attribute.

    Build it with :meth:`from_dict` (which validates and fills defaults); the
    constructor only stores values that are already resolved.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", dict(values))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], schema: tuple[Option, ...] = COMMON_OPTIONS,
                  owner: str = "session") -> SessionOptions:
        """Options from keyword or JSON values: each converted by its option's parser, missing ones set to
        their schema default; ConfigError naming an unknown name (``owner`` starts that line) or a bad value."""
        return cls(resolve_options(schema, dict(values), owner))

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (what ``session.json`` holds)."""
        return dict(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"session options have no option {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"session options are frozen; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"session options are frozen; cannot delete {name!r}")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._values))

    def __reduce__(self):
        return (type(self), (self._values,))

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value!r}" for name, value in self._values.items())
        return f"SessionOptions({inner})"


def schema_for_names(names: Iterable[str]) -> tuple[Option, ...]:
    """The common options, plus those of the rule that defines every other name in ``names``.

    A name no rule defines leaves the common schema, which :meth:`SessionOptions.from_dict` then refuses.

    >>> [opt.name for opt in schema_for_names(["seed", "alpha"])][-2:]
    ['alpha', 'tau']
    """
    common = {opt.name for opt in COMMON_OPTIONS}
    others = set(names) - common
    if not others:
        return COMMON_OPTIONS
    from theanompi.rules import RULES

    for rule_cls in RULES.values():
        schema = rule_cls.option_schema()
        if others <= {opt.name for opt in schema}:
            return schema
    return COMMON_OPTIONS


def session_options(spec) -> SessionOptions:
    """The typed options of a :class:`theanompi.session.SessionSpec`, with its rule's schema.

    >>> from theanompi.session import SessionSpec
    >>> spec = SessionSpec(rule="EASGD", devices=["cpu0"], modelfile="m", modelclass="C", options={"tau": 2})
    >>> options = session_options(spec)
    >>> options.tau, options.alpha, options.on_worker_loss
    (2, 0.5, 'abort')
    """
    from theanompi.rules import get_rule

    rule_cls = get_rule(spec.rule)
    return SessionOptions.from_dict(spec.options, rule_cls.option_schema(), rule_cls.name)


def typed_options(options: Mapping[str, Any] | None) -> SessionOptions:
    """``options`` as SessionOptions: returned as is when it already is one; a dict (a WorkerConfig's,
    which callers may build by hand, e.g. ``{"compute": "jax"}``) is resolved against the common options
    and those of the rule that defines its other names.

    >>> typed_options({"lr_scaling": "linear"}).warmup_epochs
    0.0
    >>> typed_options({"sync_type": "avg"}).avg_freq
    1
    """
    if isinstance(options, SessionOptions):
        return options
    options = dict(options or {})
    return SessionOptions.from_dict(options, schema_for_names(options), "WorkerConfig options")
