"""Rule: a parameter-sharing rule's launch side (plan, mpiexec) and the hook for its rank loop.

Subclasses set ``name`` and ``rule_options``, may override :meth:`launch_ranks`
(e.g. to add server ranks) and implement :meth:`run_rank`, which runs inside
every MPI rank (see ``theanompi.rank_main``).

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
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from theanompi.backend import configure_pytensor
from theanompi.contract import check_model_class
from theanompi.devices import Device, check_local_devices, parse_devices
from theanompi.errors import ConfigError
from theanompi.model_loader import load_model_class
from theanompi.mpirun import MpiexecRun, RankSpec, mpiexec_command
from theanompi.options import COMMON_OPTIONS, Option, check_model_options, resolve_options
from theanompi.session import SessionSpec

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
        """Validate everything a session needs and return its spec and ranks (nothing started)."""
        cwd = os.path.abspath(cwd or os.getcwd())
        devices = parse_devices(devices)
        resolved = resolve_options(cls.option_schema(), options, cls.name)
        model_options = check_model_options(model_options or {})
        cls.check_options(devices, resolved)
        if resolved["on_worker_loss"] == "continue" and not cls.supports_worker_loss:
            raise ConfigError(f"ON_WORKER_LOSS=continue: RULE={cls.name} cannot carry on without a worker "
                              "(EASGD and ASGD can); use ON_WORKER_LOSS=abort")
        check_local_devices(devices)
        from theanompi.compute import check_compute

        check_compute(devices, resolved)  # cuda devices compute through JAX
        if not isinstance(modelfile, str) or not modelfile.strip():
            raise ConfigError(f"MODELFILE={modelfile!r} must name a module or a .py file")
        if not isinstance(modelclass, str) or not modelclass.isidentifier():
            raise ConfigError(f"MODELCLASS={modelclass!r} must be a class name")
        if "pytensor" not in sys.modules:
            configure_pytensor()  # the model module may import pytensor: same cache and backend
        model_cls = load_model_class(modelfile, modelclass, cwd)
        check_model_class(model_cls)
        if callable(getattr(model_cls, "validate_options", None)):
            model_cls.validate_options(model_options)
        notes = cls.adapt_to_model(model_cls, resolved, given=options)
        ranks = cls.launch_ranks(devices, resolved)
        if resolved["run_dir"] is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            resolved["run_dir"] = os.path.join("runs", f"{cls.name.lower()}-{stamp}-{os.getpid()}")
        resolved["run_dir"] = os.path.join(cwd, resolved["run_dir"])
        cls._check_checkpoint_options(resolved, cwd)
        spec = SessionSpec(
            rule=cls.name, devices=[str(d) for d in devices], modelfile=modelfile,
            modelclass=modelclass, options=resolved, model_options=model_options,
            ranks=[{"role": r.role, "device": str(r.device)} for r in ranks], cwd=cwd, notes=notes,
        )
        return spec, ranks

    @classmethod
    def adapt_to_model(cls, model_cls: type, options: dict[str, Any], given: dict[str, Any]) -> list[str]:
        """Adjust resolved ``options`` to the ModelClass (``given``: what the user set); returns notes
        for the launch line. Models written for Theano-MPI compute with pytensor's C backend."""
        from theanompi.theano_mpi_contract import follows_theanompi_contract

        if follows_theanompi_contract(model_cls) and options.get("compute") == "jax":
            raise ConfigError(f"COMPUTE=jax: ModelClass {model_cls.__name__!r} follows Theano-MPI's contract and "
                              "compiles its own functions with pytensor's C backend; use COMPUTE=c and cpu devices")
        return []

    @classmethod
    def _check_checkpoint_options(cls, options: dict[str, Any], cwd: str) -> None:
        """Resolve checkpoint paths; pre-load RESUME (refusing unsafe or foreign files)."""
        if options.get("checkpoint_dir") is None:
            options["checkpoint_dir"] = os.path.join(options["run_dir"], "checkpoints")
        options["checkpoint_dir"] = os.path.join(cwd, options["checkpoint_dir"])
        if options.get("resume"):
            from theanompi.checkpoint import load_newest_intact

            # refuses unsafe or foreign files before any rank starts; skips a damaged newest one
            path, payload = load_newest_intact(os.path.join(cwd, options["resume"]))
            if payload["rule"] != cls.name:
                raise ConfigError(f"RESUME={str(path)!r} is a {payload['rule']} checkpoint, not {cls.name}")
            options["resume"] = str(path)

    def start(self, spec: SessionSpec, ranks: list[RankSpec]) -> "Rule":
        """Claim the run directory (one session at a time, stale rank status cleared), write the spec
        into it and start mpiexec. ConfigError if the directory is busy or a path is not writable."""
        from theanompi.run_dir import check_writable_dir, claim_run_dir

        self._refuse_a_second_session()
        run_dir = Path(spec.run_dir)
        claim = claim_run_dir(run_dir)
        try:
            if spec.options.get("checkpoint_every"):
                check_writable_dir("CHECKPOINT_DIR", Path(spec.options["checkpoint_dir"]))
            spec_path = run_dir / "session.json"
            try:
                spec.save(spec_path)
            except OSError as err:
                raise ConfigError(f"RUN_DIR={str(run_dir)!r}: {spec_path.name} cannot be written: "
                                  f"{err.strerror or err}") from None
            argv = mpiexec_command(ranks, str(spec_path), bind=spec.options["bind"],
                                   threads=spec.options.get("threads", 0),
                                   fault_tolerant=spec.options.get("on_worker_loss") == "continue")
            notes = "".join(f"; {note}" for note in spec.notes)
            log.info("starting %d ranks: %s%s", len(ranks), ", ".join(str(r.device) for r in ranks), notes)
            self.spec = spec
            self.session = MpiexecRun(argv, run_dir, ranks, claim=claim)
        except BaseException:
            claim.release()
            raise
        return self

    def _refuse_a_second_session(self) -> None:
        """RuntimeError while this object's session has not been waited for (its outcome would be lost)."""
        if self.session is not None and self.session.code is None:
            raise RuntimeError(f"{type(self).__name__}.init(): this object already runs a session "
                               f"(RUN_DIR={str(self.run_dir)!r}); wait() for it first, or use another "
                               f"{type(self).__name__}()")

    def init(self, devices, modelfile: str, modelclass: str,
             model_options: dict[str, Any] | None = None, **options: Any) -> "Rule":
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
