"""A ModelClass's ``MODEL_*`` options: declared once per class, merged along the class hierarchy, parsed at launch.

A model option is what a session option is (:mod:`theanompi.core.options`): a cfg key, a parser, a help line,
plus its name and default (:func:`~theanompi.core.options.model_option`). A class derived from
:class:`HasModelOptions` declares, in its body,

* ``declared_options``: the options it adds, a list of ``model_option(name, parser, default, help)``;
* ``defaults``: the defaults it changes (``{"lr": 0.01}``). An entry naming no option yet -- the ModelClass
  contract's plain spelling, ``defaults = {**ClassifierModel.defaults, "hidden": 64}`` -- becomes an option of its
  own, parsed by ``checks[name]`` if there is one and taken as given otherwise;
* ``checks``: parsers of such plain entries (or replacing an inherited option's parser).

Nothing is merged by hand: when the class is created, its bases' tables (in method resolution order) and its own
declarations become :attr:`~HasModelOptions.option_table`, and ``defaults`` / ``checks`` then read as every
option's default / parser, so ``{**Base.defaults, ...}`` in a subclass keeps working. The launcher calls
:meth:`~HasModelOptions.validate_options` before any rank starts (each value through its parser, then
:meth:`~HasModelOptions.check_options`, the checks of several options together); every rank builds ``self.hp``,
a dict of the parsed values, the same way.

Example
-------
>>> from theanompi.core.options import model_option, positive_int, predicate_parser
>>> class Net(HasModelOptions):
...     declared_options = [model_option("width", positive_int, 16, "channels of the first layer")]
>>> class Wide(Net):
...     defaults = {"width": 64}
>>> class Plain(Wide):       # the contract's plain spelling: a dict of defaults, a dict of checks
...     defaults = {**Wide.defaults, "depth": 3}
...     checks = {"depth": predicate_parser(lambda v: v in (3, 5), "3 or 5")}
>>> Wide.defaults, Plain.defaults, Plain.validate_options({"width": "32"})
({'width': 64}, {'width': 64, 'depth': 3}, {'width': 32, 'depth': 3})
>>> Plain.validate_options({"depth": 4})
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: Plain: model option depth=4 is not allowed; use 3 or 5
>>> Plain.validate_options({"height": 4})
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: Plain: unknown model option 'height' (cfg MODEL_HEIGHT); allowed: depth, width
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from theanompi.core.errors import ConfigError
from theanompi.core.options import ModelOption, any_value, model_option


class OptionTable(Mapping[str, ModelOption]):
    """Name -> :class:`~theanompi.core.options.ModelOption`, in declaration order (inherited options first).

    Example
    -------
    >>> from theanompi.core.options import positive_int
    >>> table = OptionTable([model_option("batch_size", positive_int, 32, "images per worker and step")])
    >>> table.defaults(), table.parse({"batch_size": "8"}, "Net"), table["batch_size"].cfg_key
    ({'batch_size': 32}, {'batch_size': 8}, 'MODEL_BATCH_SIZE')
    """

    def __init__(self, options: Iterable[ModelOption] = ()) -> None:
        self._options = {opt.name: opt for opt in options}

    def __getitem__(self, name: str) -> ModelOption:
        return self._options[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __repr__(self) -> str:
        return f"OptionTable({', '.join(self._options)})"

    def defaults(self) -> dict[str, Any]:
        """Every option at its default."""
        return {name: opt.default for name, opt in self._options.items()}

    def parse(self, given: Mapping[str, Any], owner: str) -> dict[str, Any]:
        """The defaults with ``given`` values, each through its option's parser; ConfigError naming ``owner`` (the
        ModelClass) and an unknown name or a bad value."""
        unknown = sorted(set(given) - set(self._options))
        if unknown:
            raise ConfigError(f"{owner}: unknown model option {unknown[0]!r} (cfg MODEL_{unknown[0].upper()}); "
                              f"allowed: {', '.join(sorted(self._options))}")
        values = self.defaults()
        for name, value in given.items():
            values[name] = self._options[name].convert(value, owner)
        return values

    def declare(self, declarations: Declarations) -> OptionTable:
        """This table with one class's declarations: options added (or redeclared), defaults changed, plain
        ``defaults`` entries added as options (parsed by their ``checks`` entry, else taken as given), parsers
        replaced by ``checks``."""
        options = dict(self._options)
        for opt in declarations.options:
            options[opt.name] = opt
        for name, default in declarations.defaults.items():
            if name in options:
                options[name] = options[name].with_default(default)
            else:
                options[name] = model_option(name, declarations.checks.get(name, any_value), default, "")
        for name, parse in declarations.checks.items():
            if name in options:
                options[name] = options[name].with_parser(parse)
        return OptionTable(options.values())


@dataclass(frozen=True)
class Declarations:
    """What one class's body says about its options (see the module docstring)."""

    options: tuple[ModelOption, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Callable[[Any], Any]] = field(default_factory=dict)


class HasModelOptions:
    """A ModelClass whose ``MODEL_*`` options are declared in its body and merged along its class hierarchy.

    Example
    -------
    >>> from theanompi.models.base import ClassifierModel
    >>> ClassifierModel.option_table["momentum"].option.help
    'momentum of SGD (0: plain SGD)'
    """

    #: in a class body: the options this class adds, a list of ``model_option(...)``; never merged by hand
    declared_options: ClassVar[Sequence[ModelOption]] = ()
    #: in a class body: the defaults this class changes or adds; on the class: every option's default
    defaults: ClassVar[dict[str, Any]] = {}
    #: in a class body: parsers of plain ``defaults`` entries (or replacing inherited ones); on the class: every
    #: option's parser
    checks: ClassVar[dict[str, Callable[[Any], Any]]] = {}
    #: every option of this class: its bases' and its own, merged when the class is created
    option_table: ClassVar[OptionTable] = OptionTable()
    #: what this class's own body declared (read when a subclass merges)
    _declarations: ClassVar[Declarations | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        cls._declarations = Declarations(tuple(own.get("declared_options", ())), dict(own.get("defaults", {})),
                                         dict(own.get("checks", {})))
        table = OptionTable()
        for klass in reversed(cls.__mro__):
            declarations = vars(klass).get("_declarations")
            if declarations is not None:
                table = table.declare(declarations)
        cls.option_table = table
        cls.defaults = table.defaults()
        cls.checks = {name: opt.option.parse for name, opt in table.items()}

    @classmethod
    def validate_options(cls, model_options: Mapping[str, Any]) -> dict[str, Any]:
        """The options' defaults with ``model_options``, each parsed, then :meth:`check_options`; ConfigError in
        one line for an unknown name, a bad value or a bad combination."""
        values = cls.option_table.parse(model_options, cls.__name__)
        cls.check_options(values)
        return values

    @classmethod
    def check_options(cls, hp: dict[str, Any]) -> None:
        """Checks of several parsed options together, or of a value against this machine (a data directory):
        ConfigError. A subclass with checks of its own overrides this and calls ``super().check_options(hp)``."""
