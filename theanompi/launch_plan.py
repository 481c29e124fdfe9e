"""The launch side of a session: check everything a session needs and plan its ranks
(:func:`plan_session`, nothing started), then claim the run directory and start mpiexec
(:func:`start_session`). ``Rule.init`` is these two steps.

Example
-------
>>> from theanompi.rules import BSP
>>> spec, ranks = plan_session(BSP, ["cpu0", "cpu1"], "theanompi.models.mlp", "MLP", n_epochs=2)  # doctest: +SKIP
>>> [r.role for r in ranks]                                                                      # doctest: +SKIP
['worker', 'worker']
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from theanompi.backend import configure_pytensor
from theanompi.checkpoint import load_newest_intact
from theanompi.compute import check_compute
from theanompi.contract import check_model_class
from theanompi.devices import check_local_devices, parse_devices
from theanompi.errors import ConfigError
from theanompi.model_loader import load_model_class
from theanompi.mpirun import MpiexecRun, RankSpec, mpiexec_command
from theanompi.option_checks import check_model_reference, check_worker_loss
from theanompi.options import parse_model_options, resolve_options
from theanompi.run_dir import check_writable_dir, claim_run_dir
from theanompi.session import SessionSpec
from theanompi.session_options import session_options

log = logging.getLogger(__name__)


def plan_session(rule_cls, devices, modelfile: str, modelclass: str, model_options: dict[str, Any] | None = None,
                 cwd: str | None = None, **options: Any) -> tuple[SessionSpec, list[RankSpec]]:
    """Validate everything a session of ``rule_cls`` needs and return its spec and ranks (nothing started)."""
    cwd = os.path.abspath(cwd or os.getcwd())
    devices = parse_devices(devices)
    resolved = resolve_options(rule_cls.option_schema(), options, rule_cls.name)
    model_options = parse_model_options(model_options or {})
    rule_cls.check_options(devices, resolved)
    check_worker_loss(rule_cls.name, rule_cls.supports_worker_loss, resolved["on_worker_loss"])
    check_local_devices(devices)
    check_compute(devices, resolved)  # cuda devices compute through JAX
    check_model_reference(modelfile, modelclass)
    if "pytensor" not in sys.modules:
        configure_pytensor()  # the model module may import pytensor: same cache and backend
    model_cls = load_model_class(modelfile, modelclass, cwd)
    check_model_class(model_cls)
    if callable(getattr(model_cls, "validate_options", None)):
        model_cls.validate_options(model_options)
    notes = rule_cls.adapt_to_model(model_cls, resolved, given=options)
    ranks = rule_cls.launch_ranks(devices, resolved)
    if resolved["run_dir"] is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        resolved["run_dir"] = os.path.join("runs", f"{rule_cls.name.lower()}-{stamp}-{os.getpid()}")
    resolved["run_dir"] = os.path.join(cwd, resolved["run_dir"])
    resolve_checkpoint_options(rule_cls.name, resolved, cwd)
    spec = SessionSpec(
        rule=rule_cls.name, devices=[str(d) for d in devices], modelfile=modelfile,
        modelclass=modelclass, options=resolved, model_options=model_options,
        ranks=[{"role": r.role, "device": str(r.device)} for r in ranks], cwd=cwd, notes=notes,
    )
    return spec, ranks


def resolve_checkpoint_options(rule_name: str, options: dict[str, Any], cwd: str) -> None:
    """Resolve checkpoint paths in ``options``; pre-load RESUME (refusing unsafe or foreign files)."""
    if options["checkpoint_dir"] is None:
        options["checkpoint_dir"] = os.path.join(options["run_dir"], "checkpoints")
    options["checkpoint_dir"] = os.path.join(cwd, options["checkpoint_dir"])
    if options["resume"]:
        # refuses unsafe or foreign files before any rank starts; skips a damaged newest one
        path, payload = load_newest_intact(os.path.join(cwd, options["resume"]))
        if payload["rule"] != rule_name:
            raise ConfigError(f"RESUME={str(path)!r} is a {payload['rule']} checkpoint, not {rule_name}")
        options["resume"] = str(path)


def start_session(spec: SessionSpec, ranks: list[RankSpec]) -> MpiexecRun:
    """Claim the run directory (one session at a time, stale rank status cleared), write the spec
    into it and start mpiexec. ConfigError if the directory is busy or a path is not writable."""
    run_dir = Path(spec.run_dir)
    claim = claim_run_dir(run_dir)
    try:
        options = session_options(spec)
        if options.checkpoint_every:
            check_writable_dir("CHECKPOINT_DIR", Path(options.checkpoint_dir))
        spec_path = run_dir / "session.json"
        try:
            spec.save(spec_path)
        except OSError as err:
            raise ConfigError(f"RUN_DIR={str(run_dir)!r}: {spec_path.name} cannot be written: "
                              f"{err.strerror or err}") from None
        argv = mpiexec_command(ranks, str(spec_path), bind=options.bind, threads=options.threads,
                               fault_tolerant=options.on_worker_loss == "continue")
        notes = "".join(f"; {note}" for note in spec.notes)
        log.info("starting %d ranks: %s%s", len(ranks), ", ".join(str(r.device) for r in ranks), notes)
        return MpiexecRun(argv, run_dir, ranks, claim=claim)
    except BaseException:
        claim.release()
        raise
