"""The session cfg file: ``KEY=VALUE`` lines, ``#`` comments, never evaluated by a shell.

Keys: RULE, MODELFILE, MODELCLASS, DEVICES (required); the common options
(N_EPOCHS, SEED, BIND, RUN_DIR, LOG_LEVEL, LR_SCALING, WARMUP_EPOCHS); the
rule's own (BSP_SYNC_TYPE, BSP_EXCH_STRATEGY, BSP_AVG_FREQ, ...); and
``MODEL_<NAME>`` keys passed to the ModelClass as ``model_options['<name>']``.

Example
-------
>>> raw = parse_cfg_text("RULE=BSP\\nDEVICES=cpu0,cpu1  # two workers\\n")
>>> raw["DEVICES"]
'cpu0,cpu1'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import read_bounded
from theanompi.core.options import MODEL_PREFIX, parse_literal
from theanompi.launch.plan import SessionRequest
from theanompi.rules import RULES, get_rule

REQUIRED_KEYS = ("RULE", "MODELFILE", "MODELCLASS", "DEVICES")
#: the most a cfg file holds (KEY=VALUE lines: a larger file is not a cfg file)
CFG_LIMIT = 1 << 20
_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_cfg_text(text: str, source: str = "cfg") -> dict[str, str]:
    r"""KEY -> raw value; ConfigError for a line without '=', a bad or duplicate key.

    Theano-MPI's launcher sourced its cfg in bash, and its files use two shell spellings that are read here
    too: a quoted value (``BSP_EXCH_STRATEGY='ar'``) and a parenthesised list that may span lines, one
    ``host:devices`` group per element (``DEVICES=("node0:cuda0"`` / ``"node1:cuda0,cuda1")``), read as
    the groups joined by ``;``.

    Example
    -------
    >>> raw = parse_cfg_text("BSP_EXCH_STRATEGY='ar'\nDEVICES=(\"node0:cpu0\"\n  \"node1:cpu0,cpu1\")\n")
    >>> raw["BSP_EXCH_STRATEGY"], raw["DEVICES"]
    ('ar', 'node0:cpu0;node1:cpu0,cpu1')
    """
    raw: dict[str, str] = {}
    text = text[1:] if text.startswith("\ufeff") else text  # a byte-order mark
    lines = iter(enumerate(text.splitlines(), 1))
    for lineno, line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise ConfigError(f"{source}:{lineno}: {line!r} is not KEY=VALUE")
        key, value = (part.strip() for part in line.split("=", 1))
        key = key.upper()
        if not _KEY_RE.match(key):
            raise ConfigError(f"{source}:{lineno}: key {key!r} is malformed (letters, digits, '_')")
        if key in raw:
            raise ConfigError(f"{source}:{lineno}: key {key} is given twice")
        if value.startswith("("):
            value = _shell_list(value, lines, f"{source}:{lineno}", key)
        raw[key] = _unquoted(value)
    return raw


def _unquoted(value: str) -> str:
    """``value`` without one pair of matching shell quotes around it."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _shell_list(first: str, lines: Iterator[tuple[int, str]], where: str, key: str) -> str:
    """A bash array ``(a b ...)``, possibly continued on the following lines: its elements joined by ``;``."""
    body = first[1:]
    while ")" not in body:
        try:
            _, line = next(lines)
        except StopIteration:
            raise ConfigError(f"{where}: {key}=( is not closed by ')'") from None
        body += " " + line.split("#", 1)[0].strip()
    inside, rest = body.split(")", 1)
    if rest.strip():
        raise ConfigError(f"{where}: {key}: {rest.strip()!r} after ')'")
    return ";".join(_unquoted(item) for item in inside.split())


def read_cfg_file(path: str | Path) -> dict[str, str]:
    """The keys of a cfg file: a regular file (a FIFO, a device or a link to one is refused) of at most
    :data:`CFG_LIMIT` bytes; ConfigError naming it otherwise."""
    path = Path(path)
    if not os.path.lexists(path):
        raise ConfigError(f"cfg file {str(path)!r} does not exist")
    try:
        data = read_bounded(path, CFG_LIMIT, "cfg file")
        text = data.decode("utf-8-sig")  # an editor's byte-order mark is not part of the first key
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cfg file {str(path)!r} cannot be read: {err}") from None
    return parse_cfg_text(text, source=str(path))


def session_request(raw: dict[str, str], cwd: str | None = None) -> SessionRequest:
    """The session that raw cfg keys ask for, every value parsed once (ConfigError naming a bad key or value)."""
    missing = [k for k in REQUIRED_KEYS if not raw.get(k)]
    if missing:
        raise ConfigError(f"cfg: required key {missing[0]} is missing (required: {', '.join(REQUIRED_KEYS)})")
    rule = get_rule(raw["RULE"])
    cfg_keys = rule.options_class.cfg_keys()
    option_keys: dict[str, str] = {}
    model_options: dict[str, Any] = {}
    for key, value in raw.items():
        if key in REQUIRED_KEYS:
            continue
        if key in cfg_keys:
            option_keys[key] = value
        elif key.startswith(MODEL_PREFIX) and len(key) > len(MODEL_PREFIX):
            model_options[key[len(MODEL_PREFIX):].lower()] = parse_literal(value)
        else:
            owner = next((name for name in RULES if name != rule.name and key.startswith(f"{name}_")), None)
            if owner:
                raise ConfigError(f"cfg: key {key} belongs to RULE={owner}, but RULE={rule.name}")
            allowed = sorted(REQUIRED_KEYS + cfg_keys) + ["MODEL_<NAME>"]
            raise ConfigError(f"cfg: unknown key {key}={value!r}; allowed: {', '.join(allowed)}")
    options = rule.options_class.from_cfg(option_keys)
    by_key = {opt.cfg_key: name for name, opt in rule.options_class.schema().items()}
    return SessionRequest(rule=rule, devices=raw["DEVICES"], modelfile=raw["MODELFILE"], modelclass=raw["MODELCLASS"],
                          options=options, given=frozenset(by_key[key] for key in option_keys),
                          model_options=model_options, cwd=cwd)
