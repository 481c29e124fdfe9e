"""Parameter-sharing rules, by the name RULE takes in the cfg file.

Each rule is a :class:`~theanompi.rules.base.Rule`: what the launcher asks about a session, and the loop every rank
runs. ``from theanompi import BSP`` gives the user's handle on a session instead (:mod:`theanompi.launch.handles`).

Example
-------
>>> get_rule("easgd").options_class.defaults().tau
4
"""

from __future__ import annotations

from theanompi.core.session_options import rule_name
from theanompi.rules.asgd import ASGD
from theanompi.rules.base import Rule
from theanompi.rules.bsp import BSP
from theanompi.rules.easgd import EASGD
from theanompi.rules.gosgd import GOSGD

RULES: dict[str, type[Rule]] = {rule.name: rule for rule in (BSP, EASGD, GOSGD, ASGD)}


def get_rule(name: str) -> type[Rule]:
    """Rule class for a RULE value (case-insensitive); ConfigError listing the allowed ones."""
    return RULES[rule_name(name)]


__all__ = ["ASGD", "BSP", "EASGD", "GOSGD", "RULES", "Rule", "get_rule"]
