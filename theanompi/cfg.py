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

import re
from pathlib import Path
from typing import Any

from theanompi.errors import ConfigError
from theanompi.options import MODEL_PREFIX, parse_literal

REQUIRED_KEYS = ("RULE", "MODELFILE", "MODELCLASS", "DEVICES")
_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_cfg_text(text: str, source: str = "cfg") -> dict[str, str]:
    """KEY -> raw value; ConfigError for a line without '=', a bad or duplicate key."""
    raw: dict[str, str] = {}
    text = text[1:] if text.startswith("\ufeff") else text  # a byte-order mark
    for lineno, line in enumerate(text.splitlines(), 1):
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
        raw[key] = value
    return raw


def read_cfg_file(path: str | Path) -> dict[str, str]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"cfg file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")  # an editor's byte-order mark is not part of the first key
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cfg file {str(path)!r} cannot be read: {err}") from None
    return parse_cfg_text(text, source=str(path))


def session_arguments(raw: dict[str, str]) -> tuple[type, dict[str, Any]]:
    """Map raw cfg keys onto ``(RuleClass, keyword arguments of Rule.plan_session)``."""
    from theanompi.rules import RULES, get_rule

    missing = [k for k in REQUIRED_KEYS if not raw.get(k)]
    if missing:
        raise ConfigError(f"cfg: required key {missing[0]} is missing (required: {', '.join(REQUIRED_KEYS)})")
    rule_cls = get_rule(raw["RULE"])
    by_key = {opt.cfg_key: opt for opt in rule_cls.option_schema()}
    other_prefixes = {f"{name}_": name for name in RULES if name != rule_cls.name}
    kwargs: dict[str, Any] = {
        "devices": raw["DEVICES"], "modelfile": raw["MODELFILE"], "modelclass": raw["MODELCLASS"],
        "model_options": {},
    }
    for key, value in raw.items():
        if key in REQUIRED_KEYS:
            continue
        if key in by_key:
            kwargs[by_key[key].name] = by_key[key].convert(value)
        elif key.startswith(MODEL_PREFIX) and len(key) > len(MODEL_PREFIX):
            kwargs["model_options"][key[len(MODEL_PREFIX):].lower()] = parse_literal(value)
        else:
            owner = next((name for prefix, name in other_prefixes.items() if key.startswith(prefix)), None)
            if owner:
                raise ConfigError(f"cfg: key {key} belongs to RULE={owner}, but RULE={rule_cls.name}")
            allowed = sorted(REQUIRED_KEYS + tuple(by_key)) + ["MODEL_<NAME>"]
            raise ConfigError(f"cfg: unknown key {key}={value!r}; allowed: {', '.join(allowed)}")
    return rule_cls, kwargs
