"""How session options are parsed: the parsers of their values, each option's :class:`Option`, ``MODEL_*`` values.

Each :class:`Option` is a field of SessionOptions: a Python keyword (the field's name,
``sync_type``) and a cfg key (``BSP_SYNC_TYPE``). Values arrive as strings (cfg) or Python objects
(``Rule.init``); the option's parser converts and validates both. The table of every
option (common ones and each rule's) is :mod:`theanompi.core.session_options`, whose
typed, frozen :class:`~theanompi.core.session_options.SessionOptions` is what every layer reads.

Validators: one style
---------------------
Every bad input ends in one :class:`~theanompi.core.errors.ConfigError` line that
names the key and quotes the value; validators come in two kinds only.

* **Parsers** check one value: ``parse(value) -> value`` (converted to its type,
  canonical spelling), raising :class:`InvalidValue` whose text says what is
  allowed (``"use an integer >= 1"``). :meth:`Option.convert` adds key and value:
  ``KEY='value' is not allowed; use ...``. Write new ones here, beside
  :func:`positive_int` and :func:`choice`. A ModelClass's option parsers
  (``checks``, :mod:`theanompi.models.hyperparams`) are the same kind; a yes/no
  test becomes one through :func:`predicate_parser`.
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


#: the most epochs a session may ask for (a larger count is a typo, and overflows the time arithmetic)
MAX_EPOCHS = 10**6


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


def choice(*allowed: str) -> Callable[[Any], str]:
    """Parser accepting one of ``allowed`` (case-insensitive), returning the canonical spelling."""

    def parse(value: Any) -> str:
        text = str(value).strip()
        for item in allowed:
            if text.lower() == item.lower():
                return item
        raise InvalidValue("use one of: " + ", ".join(allowed))

    return parse


def predicate_parser(test: Callable[[Any], bool], allowed: str) -> Callable[[Any], Any]:
    """A parser from a yes/no test (the model options' checks): the value itself when ``test(value)``,
    else InvalidValue("use " + allowed).

    >>> even = predicate_parser(lambda v: isinstance(v, int) and v % 2 == 0, "an even integer")
    >>> even(4)
    4
    >>> even(3)
    Traceback (most recent call last):
    ...
    theanompi.core.options.InvalidValue: use an even integer
    """

    def parse(value: Any) -> Any:
        if not test(value):
            raise InvalidValue(f"use {allowed}")
        return value

    return parse


def text_value(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise InvalidValue("use a non-empty value")
    return text


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


def option(cfg_key: str, parse: Callable[[Any], Any], default: Any, help: str) -> Any:
    """A dataclass field that is a session option: ``sync_type: str = option("BSP_SYNC_TYPE", ...)``."""
    return field(default=default, metadata={"option": Option(cfg_key, parse, help)})


MODEL_PREFIX = "MODEL_"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
