"""Parameter-sharing rules, by the name RULE takes in the cfg file."""

from __future__ import annotations

from theanompi.errors import ConfigError
from theanompi.rules.asgd import ASGD
from theanompi.rules.base import Rule
from theanompi.rules.bsp import BSP
from theanompi.rules.easgd import EASGD
from theanompi.rules.gosgd import GOSGD

RULES: dict[str, type[Rule]] = {"BSP": BSP, "EASGD": EASGD, "GOSGD": GOSGD, "ASGD": ASGD}


def get_rule(name: str) -> type[Rule]:
    """Rule class for a RULE value (case-insensitive); ConfigError listing the allowed ones."""
    for key, cls in RULES.items():
        if str(name).strip().upper() == key:
            return cls
    raise ConfigError(f"RULE={name!r} is not allowed; use one of: {', '.join(RULES)}")


__all__ = ["ASGD", "BSP", "EASGD", "GOSGD", "RULES", "Rule", "get_rule"]
