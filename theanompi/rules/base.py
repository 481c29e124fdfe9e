"""Rule: the interface of a parameter-sharing rule -- its name and options, the ranks it
launches, its checks, its rank loop -- and the user's handle on a session (``init``/``wait``).

Subclasses set ``name`` and ``rule_options``, may override :meth:`launch_ranks`
(e.g. to add server ranks), :meth:`check_options` and :meth:`adapt_to_model`, and
implement :meth:`run_rank`, which runs inside every MPI rank (see ``theanompi.rank_main``).
Planning and starting a session is :mod:`theanompi.launch_plan`'s work.

Example
-------
>>> from theanompi import BSP
>>> rule = BSP()
>>> rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp",
...           modelclass="MLP", n_epochs=5)             # doctest: +SKIP
>>> rule.wait()                                          # doctest: +SKIP
0
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from theanompi import launch_plan
from theanompi.devices import Device
from theanompi.errors import ConfigError
from theanompi.mpirun import MpiexecRun, RankSpec
from theanompi.options import COMMON_OPTIONS, Option
from theanompi.session import SessionSpec
from theanompi.theano_mpi_contract import follows_theanompi_contract

log = logging.getLogger(__name__)


class Rule:
    """Base class of BSP, EASGD, GOSGD, ASGD."""

    name: ClassVar[str] = ""
    rule_options: ClassVar[tuple[Option, ...]] = ()
    #: whether the rule's survivors can carry on without a lost worker (ON_WORKER_LOSS=continue)
    supports_worker_loss: ClassVar[bool] = False

    def __init__(self):
        self.spec: SessionSpec | None = None
        self.session: MpiexecRun | None = None

    # ----- launch side -------------------------------------------------------------
    @classmethod
    def option_schema(cls) -> tuple[Option, ...]:
        return COMMON_OPTIONS + cls.rule_options

    @classmethod
    def launch_ranks(cls, devices: list[Device], options: dict[str, Any]) -> list[RankSpec]:
        """One worker rank per device; rules with servers add theirs."""
        return [RankSpec(device, "worker") for device in devices]

    @classmethod
    def check_options(cls, devices: list[Device], options: dict[str, Any]) -> None:
        """Cross-checks between options and devices (ConfigError); override as needed."""

    @classmethod
    def plan_session(cls, devices, modelfile: str, modelclass: str,
                     model_options: dict[str, Any] | None = None, cwd: str | None = None,
                     **options: Any) -> tuple[SessionSpec, list[RankSpec]]:
        """Validate everything a session needs and return its spec and ranks (nothing started);
        see :func:`theanompi.launch_plan.plan_session`."""
        return launch_plan.plan_session(cls, devices, modelfile, modelclass, model_options, cwd, **options)

    @classmethod
    def adapt_to_model(cls, model_cls: type, options: dict[str, Any], given: dict[str, Any]) -> list[str]:
        """Adjust resolved ``options`` to the ModelClass (``given``: what the user set); returns notes
        for the launch line. Models written for Theano-MPI compute with pytensor's C backend."""
        if follows_theanompi_contract(model_cls) and options["compute"] == "jax":
            raise ConfigError(f"COMPUTE=jax: ModelClass {model_cls.__name__!r} follows Theano-MPI's contract and "
                              "compiles its own functions with pytensor's C backend; use COMPUTE=c and cpu devices")
        return []

    def start(self, spec: SessionSpec, ranks: list[RankSpec]) -> Rule:
        """Start a planned session (see :func:`theanompi.launch_plan.start_session`); ``wait()`` for it."""
        self._refuse_a_second_session()
        self.session = launch_plan.start_session(spec, ranks)
        self.spec = spec
        return self

    def _refuse_a_second_session(self) -> None:
        """RuntimeError while this object's session has not been waited for (its outcome would be lost)."""
        if self.session is not None and self.session.code is None:
            raise RuntimeError(f"{type(self).__name__}.init(): this object already runs a session "
                               f"(RUN_DIR={str(self.run_dir)!r}); wait() for it first, or use another "
                               f"{type(self).__name__}()")

    def init(self, devices, modelfile: str, modelclass: str,
             model_options: dict[str, Any] | None = None, **options: Any) -> Rule:
        """Start a session (non-blocking); ``wait()`` returns its exit code.

        ``options`` are the rule's keyword options (``n_epochs``, ``seed``, and
        the rule's own, e.g. BSP's ``sync_type``); ``model_options`` reach the
        ModelClass as ``config.model_options``. Raises ConfigError on bad input, RuntimeError while
        this object's previous session has not been waited for. May be called from a short-lived
        thread: the session does not end with it.
        """
        self._refuse_a_second_session()
        spec, ranks = self.plan_session(devices, modelfile, modelclass, model_options, **options)
        return self.start(spec, ranks)

    def wait(self) -> int:
        """Block until the session ends; 0 on success. A failure is logged naming the rank."""
        if self.session is None:
            raise RuntimeError(f"{type(self).__name__}.wait() called before init()")
        code = self.session.wait()
        if code != 0:
            log.error("session failed: %s", self.session.failure)
        elif self.session.lost:
            log.warning("session finished; carried on without %s (lost during the session)",
                        "; ".join(self.session.lost))
        return code

    @property
    def failure(self) -> str | None:
        """One line explaining why the session failed (None while running or on success)."""
        return self.session.failure if self.session else None

    @property
    def run_dir(self) -> Path | None:
        return Path(self.spec.run_dir) if self.spec else None

    # ----- rank side ---------------------------------------------------------------
    @classmethod
    def run_rank(cls, ctx) -> None:
        """The rule's process loop, run in every rank (``ctx``: theanompi.rank_main.RankContext)."""
        raise NotImplementedError(f"rule {cls.name} has no rank loop")
