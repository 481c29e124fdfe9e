"""Rule: what a parameter-sharing rule is -- its name and options class, the ranks it launches, its checks against
the devices and the ModelClass, and its rank loop.

A rule is a class used through its classmethods; the launcher asks it about a session before starting one
(:mod:`theanompi.launch.plan`), and every rank runs :meth:`Rule.run_rank` (:mod:`theanompi.rules.rank_main`).
The user's handle on a session (``BSP().init(...)``, ``wait()``) is :mod:`theanompi.launch.handles`.

Subclasses set ``name`` and ``options_class``, may override :meth:`launch_ranks` (e.g. to add server ranks),
:meth:`check_options` and :meth:`adapt_to_model`, and implement :meth:`run_rank`.

Example
-------
>>> from theanompi.core.devices import parse_devices
>>> from theanompi.rules import BSP
>>> options = BSP.options_class.parse({"sync_type": "avg"})
>>> [rank.role for rank in BSP.launch_ranks(parse_devices("cpu0,cpu1"), options)]
['worker', 'worker']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from theanompi.core.devices import Device
from theanompi.core.session_options import SessionOptions
from theanompi.session.spec import RankSpec

if TYPE_CHECKING:
    from theanompi.runtime.rank_context import RankContext


class Rule:
    """Base class of BSP, EASGD, GOSGD, ASGD: class-level facts and hooks, no instance state."""

    name: ClassVar[str] = ""
    options_class: ClassVar[type[SessionOptions]] = SessionOptions
    #: whether the rule's survivors can carry on without a lost worker (ON_WORKER_LOSS=continue)
    supports_worker_loss: ClassVar[bool] = False

    # ----- asked by the launcher ---------------------------------------------------------
    @classmethod
    def launch_ranks(cls, devices: list[Device], options: SessionOptions) -> list[RankSpec]:
        """One worker rank per device; rules with servers add theirs."""
        return [RankSpec(device, "worker") for device in devices]

    @classmethod
    def check_options(cls, devices: list[Device], options: SessionOptions) -> None:
        """Cross-checks between options and devices (ConfigError); override as needed."""

    @classmethod
    def adapt_to_model(cls, model_cls: type, options: SessionOptions,
                       given: frozenset[str]) -> tuple[SessionOptions, list[str]]:
        """``options`` adjusted to the ModelClass (``given``: the names the user set), and notes for the launch
        line. Any ModelClass runs in any compute mode: a rank makes its mode the default before it imports the
        model file, so the functions a model compiles itself run in it too (theanompi.backend.compute)."""
        return options, []

    # ----- run by every rank -------------------------------------------------------------
    @classmethod
    def run_rank(cls, ctx: RankContext) -> None:
        """The rule's process loop, run in every rank."""
        raise NotImplementedError(f"rule {cls.name} has no rank loop")
