"""How options are parsed: the parsers of their values, each option's :class:`Option`, ``MODEL_*`` values.

An :class:`Option` is a cfg key, a parser and a help line. A session option is a field of SessionOptions
(:func:`option`): a Python keyword (the field's name, ``sync_type``) and a cfg key (``BSP_SYNC_TYPE``). A
ModelClass's option is a :class:`ModelOption` (:func:`model_option`): a name (``batch_size``), its cfg key
(``MODEL_BATCH_SIZE``), a default and the same Option. Values arrive as strings (cfg) or Python objects
(``Rule.init``, ``model_options={...}``); the option's parser converts and validates both. The table of every
session option (common ones and each rule's) is :mod:`theanompi.core.session_options`, whose typed, frozen
:class:`~theanompi.core.session_options.SessionOptions` is what every layer reads; a ModelClass's table is
merged along its class hierarchy by :class:`theanompi.models.model_options.HasModelOptions`.

Validators: one style
---------------------
Every bad input ends in one :class:`~theanompi.core.errors.ConfigError` line that
names the key and quotes the value; validators come in two kinds only.

* **Parsers** check one value: ``parse(value) -> value`` (converted to its type,
  canonical spelling), raising :class:`InvalidValue` whose text says what is
  allowed (``"use an integer >= 1"``). :meth:`Option.convert` adds key and value:
  ``KEY='value' is not allowed; use ...``. Write new ones here, beside
  :func:`positive_int` and :func:`choice`. A ModelClass's options use the same
  parsers; a yes/no test in a ModelClass's ``checks`` becomes one through
  :func:`predicate_parser`.
* **Checks** look at several values together, or at a value against this machine:
  ``check_<what>(...) -> None``, changing nothing and raising ConfigError
  directly, its line starting with ``KEY=value`` (:mod:`theanompi.core.option_checks`,
  ``devices.check_local_devices``, ``compute.check_compute``).

A function that fills in values a user left out (RUN_DIR, CHECKPOINT_DIR) is
neither: it is ``resolve_<what>(...)`` and returns what it resolved.

Example
-------
>>> opt = Option("BSP_AVG_FREQ", positive_int, "average every k iterations")
>>> opt.convert("4")
4
>>> opt.convert("0")
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: BSP_AVG_FREQ='0' is not allowed; use an integer >= 1
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from theanompi.core.errors import ConfigError

_Number = TypeVar("_Number", int, float)


class InvalidValue(ValueError):
    """Raised by a parser; its message says what is allowed."""


def _number(value: Any, cast: Callable[[str], _Number]) -> _Number | None:
    """``cast(value)`` for ints/floats and their text, None for anything else (bools included)."""
    if isinstance(value, bool):
        return None
    try:
        return cast(str(value).strip())
    except ValueError:
        return None


def positive_int(value: Any) -> int:
    number = _number(value, int)
    if number is None or number < 1:
        raise InvalidValue("use an integer >= 1")
    return number


def int_at_least(minimum: int) -> Callable[[Any], int]:
    """Parser of an integer >= ``minimum``.

    >>> int_at_least(2)("10")
    10
    >>> int_at_least(2)(1)
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use an integer >= 2
    """

    def parse(value: Any) -> int:
        number = _number(value, int)
        if number is None or number < minimum:
            raise InvalidValue(f"use an integer >= {minimum}")
        return number

    return parse


#: the most epochs a session may ask for (a larger count is a typo, and overflows the time arithmetic)
MAX_EPOCHS = 10**6


def int_of_form(step: int, offset: int) -> Callable[[Any], int]:
    """Parser of an integer ``step * n + offset`` for n >= 1 (a ResNet's depth).

    >>> int_of_form(6, 2)("20")
    20
    >>> int_of_form(6, 2)(21)
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use 6n+2 for n >= 1: 8, 14, 20, 26, ...
    """

    def parse(value: Any) -> int:
        number = _number(value, int)
        if number is None or number < step + offset or (number - offset) % step:
            examples = ", ".join(str(step * n + offset) for n in range(1, 5))
            raise InvalidValue(f"use {step}n+{offset} for n >= 1: {examples}, ...")
        return number

    return parse


def epoch_count(value: Any) -> int:
    """An epoch count in [1, MAX_EPOCHS].

    >>> epoch_count("3")
    3
    >>> epoch_count(10**23)
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use an integer from 1 to 1000000
    """
    number = _number(value, int)
    if number is None or not 1 <= number <= MAX_EPOCHS:
        raise InvalidValue(f"use an integer from 1 to {MAX_EPOCHS}")
    return number


@dataclass(frozen=True)
class _IntRange:
    """What :func:`int_range` makes: a parser that says what it accepts."""

    low: int
    high: int

    @property
    def accepts(self) -> str:
        return f"an integer from {self.low} to {self.high}"

    def __call__(self, value: Any) -> int:
        number = _number(value, int)
        if number is None or number < self.low:
            raise InvalidValue(f"use an integer >= {self.low}" if number is None or self.high >= 10**6
                               else f"use {self.accepts}")
        if number > self.high:
            raise InvalidValue(f"use {self.accepts}")
        return number


def int_range(low: int, high: int) -> Callable[[Any], int]:
    """Parser of an integer in [``low``, ``high``]: an option whose value reaches C (a seed, a count a buffer holds)
    or a clock takes what its use takes, no more.

    >>> int_range(1, 10)("7"), int_range(1, 10).accepts
    (7, 'an integer from 1 to 10')
    >>> int_range(0, 2**32 - 1)(2**64)
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use an integer from 0 to 4294967295
    """
    return _IntRange(low, high)


#: the most seconds a duration option takes (~116 days; a clock's wait with more overflows)
MAX_SECONDS = 10**7


def seconds(value: Any) -> float:
    """A duration in seconds, from 0 to :data:`MAX_SECONDS` (``threading``'s waits refuse much longer ones).

    >>> seconds("2.5"), seconds(0)
    (2.5, 0.0)
    >>> seconds("1e300")
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use seconds from 0 to 10000000
    """
    number = _number(value, float)
    if number is None or not 0.0 <= number <= MAX_SECONDS:
        raise InvalidValue(f"use seconds from 0 to {MAX_SECONDS}")
    return number


def float_range(low: float, high: float, zero: bool = False) -> Callable[[Any], float]:
    """Parser of a number in [``low``, ``high``] (``zero``: 0 too, as 'off').

    >>> float_range(0.001, 4096, zero=True)("0"), float_range(0.001, 4096, zero=True)("1e-320")
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use 0, or a number from 0.001 to 4096
    """
    said = f"{'0, or ' if zero else ''}a number from {low:g} to {high:g}"

    def parse(value: Any) -> float:
        number = _number(value, float)
        if number is None or not (low <= number <= high or (zero and number == 0.0)):
            raise InvalidValue(f"use {said}")
        return number

    return predicate_parser_with(parse, said)


def path_value(value: Any) -> str:
    """A path given as text: not empty, no NUL byte (no file name has one), at most 4096 bytes (the system's
    PATH_MAX).

    >>> path_value("runs/a")
    'runs/a'
    >>> path_value("runs/\\0a")
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use a path (non-empty, without NUL, at most 4096 bytes)
    """
    text = str(value).strip()
    if not text or "\0" in text or len(text.encode(errors="surrogateescape")) > 4096:
        raise InvalidValue("use a path (non-empty, without NUL, at most 4096 bytes)")
    return text


def non_negative_int(value: Any) -> int:
    number = _number(value, int)
    if number is None or number < 0:
        raise InvalidValue("use an integer >= 0")
    return number


def non_negative_float(value: Any) -> float:
    number = _number(value, float)
    if number is None or not number >= 0.0 or number == float("inf"):
        raise InvalidValue("use a finite number >= 0")
    return number


def fraction(value: Any) -> float:
    """A number in (0, 1]: rates and probabilities (EASGD_ALPHA, GOSGD_P).

    >>> fraction("0.25")
    0.25
    """
    number = _number(value, float)
    if number is None or not 0.0 < number <= 1.0:
        raise InvalidValue("use a number in (0, 1]")
    return number


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InvalidValue("use true or false")


def positive_float(value: Any) -> float:
    number = _number(value, float)
    if number is None or not 0.0 < number < float("inf"):
        raise InvalidValue("use a finite number > 0")
    return number


def unit_interval(value: Any) -> float:
    """A number in [0, 1)."""
    number = _number(value, float)
    if number is None or not 0.0 <= number < 1.0:
        raise InvalidValue("use a number in [0, 1)")
    return number


def choice(*allowed: Any) -> Callable[[Any], Any]:
    """Parser accepting one of ``allowed`` or its text (case-insensitive), returning the item itself.

    >>> choice("cdd", "avg")("AVG"), choice(50, 101, 152)("101")
    ('avg', 101)
    """

    def parse(value: Any) -> Any:
        text = str(value).strip().lower()
        for item in allowed:
            same_kind = isinstance(item, str) or (isinstance(value, (str, type(item))) and not isinstance(value, bool))
            if text == str(item).lower() and same_kind:
                return item
        raise InvalidValue("use one of: " + ", ".join(map(str, allowed)))

    return parse


def predicate_parser(test: Callable[[Any], bool], allowed: str) -> Callable[[Any], Any]:
    """A parser from a yes/no test (a ModelClass's ``checks``): the value itself when ``test(value)``, else
    InvalidValue("use " + allowed) -- also when the test cannot even look at the value (a TypeError, a ValueError).

    >>> even = predicate_parser(lambda v: v % 2 == 0, "an even integer")
    >>> even(4), even.accepts
    (4, 'an even integer')
    >>> even("3")
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use an even integer
    """
    return _Predicate(test, allowed)


def predicate_parser_with(parse: Callable[[Any], Any], accepts: str) -> Callable[[Any], Any]:
    """``parse`` that says what it accepts (:meth:`Option.accepts` shows it)."""
    setattr(parse, "accepts", accepts)  # noqa: B010 - a function's attribute, read by Option.accepts
    return parse


@dataclass(frozen=True)
class _Predicate:
    """What :func:`predicate_parser` makes: a parser that says what it accepts."""

    test: Callable[[Any], bool]
    accepts: str

    def __call__(self, value: Any) -> Any:
        try:
            passed = bool(self.test(value))
        except (TypeError, ValueError):
            passed = False
        if not passed:
            raise InvalidValue(f"use {self.accepts}")
        return value


def text_value(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise InvalidValue("use a non-empty value")
    return text


def directory_path(value: Any) -> str:
    """A path given as text ('' for none); whether it exists is a check of its own (at launch)."""
    if not isinstance(value, str):
        raise InvalidValue("use a directory path")
    return value


def any_value(value: Any) -> Any:
    """The value as given: the parser of a ModelClass's plain ``defaults`` entry that has no ``checks`` parser."""
    return value


def parse_int_list(value: Any) -> tuple[int, ...]:
    """``16`` or ``"16,32,64"`` (cfg text) or a list -> a tuple of ints; ``""`` -> (); ValueError for anything else.

    >>> parse_int_list("82, 123"), parse_int_list(5), parse_int_list("")
    ((82, 123), (5,), ())
    """
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str):
        items = [v for v in value.replace(" ", "").split(",") if v != ""]
    else:
        items = [value]
    out = []
    for v in items:
        if isinstance(v, bool):
            raise ValueError(value)
        out.append(int(str(v)))
    return tuple(out)


def int_list(length: int | None = None, minimum: int = 1, allow_empty: bool = False) -> Callable[[Any], str]:
    """Parser of a comma list of integers >= ``minimum`` (exactly ``length`` of them when given), returned as
    its canonical text (read back with :func:`parse_int_list`).

    >>> widths = int_list(length=2)
    >>> widths("32, 64"), widths((8, 16))
    ('32,64', '8,16')
    >>> widths("32")
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use a comma list of 2 integers >= 1 such as '16,16'
    """
    count = f"{length} " if length else ""
    example = ",".join(["16"] * (length or 2))
    allowed = f"use a comma list of {count}integers >= {minimum} such as '{example}'"

    def parse(value: Any) -> str:
        try:
            items = parse_int_list(value)
        except (ValueError, TypeError):
            raise InvalidValue(allowed) from None
        if not items and allow_empty:
            return ""
        if not items or any(i < minimum for i in items) or (length is not None and len(items) != length):
            raise InvalidValue(allowed)
        return ",".join(map(str, items))

    return parse


@dataclass(frozen=True)
class Option:
    """What a session option's cfg key is, how its values are parsed, and its help line.

    It is the metadata of one field of :class:`theanompi.core.session_options.SessionOptions` (see :func:`option`);
    the field's name is the Python keyword (``sync_type``), its default the option's default.
    """

    cfg_key: str
    parse: Callable[[Any], Any]
    help: str

    def convert(self, value: Any) -> Any:
        """Parsed value, or ConfigError naming key, value and what is allowed."""
        try:
            return self.parse(value)
        except InvalidValue as err:
            raise ConfigError(f"{self.cfg_key}={value!r} is not allowed; {err}") from None

    def accepts(self) -> str:
        """What the parser accepts: its ``accepts`` attribute where it has one, else the words of its error line;
        'any value' for a parser that refuses nothing.

        >>> Option("BSP_AVG_FREQ", positive_int, "").accepts(), Option("X", any_value, "").accepts()
        ('an integer >= 1', 'any value')
        """
        said = getattr(self.parse, "accepts", None)
        if isinstance(said, str):
            return said
        try:
            self.parse(_NOT_A_VALUE)
        except InvalidValue as err:
            return str(err).removeprefix("use ")
        except Exception:  # a ModelClass's own check that cannot even look at such a value
            return "what its check accepts"
        return "any value"


class _NotAValue:
    """What :meth:`Option.accepts` hands a parser: no number, no bool, no word, no path."""

    def __str__(self) -> str:
        return "\0"


_NOT_A_VALUE = _NotAValue()


def option(cfg_key: str, parse: Callable[[Any], Any], default: Any, help: str) -> Any:
    """A dataclass field that is a session option: ``sync_type: str = option("BSP_SYNC_TYPE", ...)``."""
    return field(default=default, metadata={"option": Option(cfg_key, parse, help)})


def rule_default(base: type, name: str, default: Any) -> Any:
    """A rule's own default for an option every rule takes: the field ``name`` of the dataclass ``base`` (its
    Option, so its cfg key, parser and help) with ``default``, declared again in the rule's subclass.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Common:
    ...     tau: int = option("TAU", positive_int, 4, "steps")
    >>> @dataclass(frozen=True)
    ... class Rule(Common):
    ...     tau: int = rule_default(Common, "tau", 8)
    >>> Common().tau, Rule().tau, dataclasses.fields(Rule)[0].metadata["option"].cfg_key
    (4, 8, 'TAU')
    """
    inherited = {f.name: f for f in dataclasses.fields(base)}[name]
    return field(default=default, metadata=inherited.metadata)


MODEL_PREFIX = "MODEL_"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelOption:
    """A ModelClass's option: its name (``batch_size``, cfg key ``MODEL_BATCH_SIZE``), its default and its
    :class:`Option` (cfg key, parser, help), what a session option's dataclass field holds. Declared with
    :func:`model_option`; a class's table of them is merged by :mod:`theanompi.models.model_options`."""

    name: str
    default: Any
    option: Option

    @property
    def cfg_key(self) -> str:
        return self.option.cfg_key

    def convert(self, value: Any, owner: str) -> Any:
        """Parsed value, or ConfigError naming the ModelClass, the option, the value and what is allowed.

        >>> model_option("lr", positive_float, 0.1, "learning rate").convert("0", "MLP")
        Traceback (most recent call last):
        ...
        theanompi.core.errors.ConfigError: MLP: model option lr='0' is not allowed; use a finite number > 0
        """
        try:
            return self.option.parse(value)
        except InvalidValue as err:
            raise ConfigError(f"{owner}: model option {self.name}={value!r} is not allowed; {err}") from None

    def with_default(self, default: Any) -> ModelOption:
        return dataclasses.replace(self, default=default)

    def with_parser(self, parse: Callable[[Any], Any]) -> ModelOption:
        return dataclasses.replace(self, option=dataclasses.replace(self.option, parse=parse))


def model_option(name: str, parse: Callable[[Any], Any], default: Any, help: str) -> ModelOption:
    """A ModelClass's option, as ``option()`` declares a session's: ``model_option("batch_size", positive_int, 32,
    "images per worker and step")`` is set by ``MODEL_BATCH_SIZE`` (cfg) or ``model_options={"batch_size": ...}``.

    >>> opt = model_option("batch_size", positive_int, 32, "images per worker and step")
    >>> opt.cfg_key, opt.default, opt.convert("64", "MLP")
    ('MODEL_BATCH_SIZE', 32, 64)
    """
    if not _NAME_RE.match(name) or name != name.lower():
        raise ValueError(f"model option name {name!r} is not a lower-case identifier")
    return ModelOption(name, default, Option(MODEL_PREFIX + name.upper(), parse, help))


def parse_literal(text: str) -> Any:
    """cfg text -> int, float, bool or str (``MODEL_*`` values)."""
    text = text.strip()
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_model_options(model_options: Any) -> dict[str, Any]:
    """The ``MODEL_*`` options as a dict with lower-cased identifier keys; ConfigError for anything else.

    >>> parse_model_options({"Batch_Size": 32})
    {'batch_size': 32}
    """
    if not isinstance(model_options, dict):
        raise ConfigError(f"model_options={model_options!r} must be a dict")
    out = {}
    for key, value in model_options.items():
        if not isinstance(key, str) or not _NAME_RE.match(key):
            raise ConfigError(f"model option name {key!r} is not an identifier")
        out[key.lower()] = value
    return out
