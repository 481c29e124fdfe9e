"""The launch side of a session: check everything a session needs and plan its ranks
(:func:`plan_session`, nothing started), then claim the run directory and start mpiexec
(:func:`start_session`). ``BSP().init(...)`` and ``tmlauncher`` are these two steps.

Example
-------
>>> from theanompi.rules import BSP
>>> request = SessionRequest.from_keywords(BSP, ["cpu0", "cpu1"], "theanompi.models.mlp", "MLP", n_epochs=2)
>>> request.options.n_epochs, sorted(request.given)
(2, ['n_epochs'])
>>> spec, ranks = plan_session(request)                              # doctest: +SKIP
>>> [r.role for r in ranks]                                          # doctest: +SKIP
['worker', 'worker']
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theanompi.backend.compute import check_compute
from theanompi.backend.pytensor_config import configure_pytensor
from theanompi.core.devices import check_local_devices, parse_devices
from theanompi.core.errors import ConfigError
from theanompi.core.option_checks import check_model_reference, check_worker_loss
from theanompi.core.options import parse_model_options
from theanompi.core.session_options import SessionOptions
from theanompi.launch.mpiexec import MpiexecRun, mpiexec_command
from theanompi.models.contract import check_model_class
from theanompi.models.loader import load_model_class
from theanompi.rules.base import Rule
from theanompi.session.checkpoint import load_newest_intact
from theanompi.session.run_dir import check_writable_dir, claim_run_dir
from theanompi.session.spec import RankSpec, SessionSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionRequest:
    """What the user asked for, its options already parsed (by the cfg reader or ``BSP().init``'s keywords).

    ``given`` names the options the user set (the rest hold their defaults): a rule may adapt only what was not
    given (BSP's sync type).
    """

    rule: type[Rule]
    devices: str | list[str] | tuple[str, ...]
    modelfile: str
    modelclass: str
    options: SessionOptions
    given: frozenset[str] = frozenset()
    model_options: dict[str, Any] = field(default_factory=dict)
    cwd: str | None = None

    @classmethod
    def from_keywords(cls, rule: type[Rule], devices: Any, modelfile: Any, modelclass: Any,
                      model_options: Any = None, cwd: str | None = None, **options: Any) -> SessionRequest:
        """A request from Python keywords (``BSP().init(devices=..., sync_type="avg")``), parsed and checked."""
        return cls(rule=rule, devices=devices, modelfile=modelfile, modelclass=modelclass,
                   options=rule.options_class.parse(options, owner=rule.name),
                   given=frozenset(name for name, value in options.items() if value is not None),
                   model_options=parse_model_options(model_options or {}), cwd=cwd)


def plan_session(request: SessionRequest) -> tuple[SessionSpec, list[RankSpec]]:
    """Check everything a session needs and return its spec and ranks (nothing started)."""
    rule = request.rule
    cwd = os.path.abspath(request.cwd or os.getcwd())
    devices = parse_devices(request.devices)
    options = request.options
    rule.check_options(devices, options)
    check_worker_loss(rule.name, rule.supports_worker_loss, options.on_worker_loss)
    check_local_devices(devices)
    check_compute(devices, options.compute)  # cuda devices compute through JAX
    check_model_reference(request.modelfile, request.modelclass)
    if "pytensor" not in sys.modules:
        configure_pytensor()  # the model module may import pytensor: same cache and backend
    model_cls = load_model_class(request.modelfile, request.modelclass, cwd)
    check_model_class(model_cls)
    model_options, data_notes = resolve_data_dir(model_cls, request.model_options)
    validate_options = getattr(model_cls, "validate_options", None)
    if callable(validate_options):
        validate_options(model_options)
    options, notes = rule.adapt_to_model(model_cls, options, request.given)
    notes = notes + data_notes
    ranks = rule.launch_ranks(devices, options)
    options = resolve_paths(rule.name, options, cwd)
    spec = SessionSpec(
        rule=rule.name, devices=[str(d) for d in devices], modelfile=request.modelfile,
        modelclass=request.modelclass, options=options, model_options=model_options,
        ranks=[{"role": r.role, "device": str(r.device)} for r in ranks], cwd=cwd, notes=notes,
    )
    return spec, ranks


#: the environment variable giving the model option ``data_dir`` when neither the cfg nor ``init`` gives one
DATA_DIR_ENV = "MODEL_DATA_DIR"


def resolve_data_dir(model_cls: type, model_options: dict[str, Any],
                     environ: Mapping[str, str] = os.environ) -> tuple[dict[str, Any], list[str]]:
    """``model_options`` with ``data_dir`` taken from the environment's ``MODEL_DATA_DIR`` where the user gave
    none (Theano-MPI's scripts call ``init`` without model options) and the ModelClass reads one (its option
    table has ``data_dir``, or it has no table: Theano-MPI's DataClasses read it from the session); and the
    launch line's note saying so.

    Example
    -------
    >>> class Reader:
    ...     defaults = {"data_dir": ""}
    ...     @classmethod
    ...     def validate_options(cls, options): return options
    >>> resolve_data_dir(Reader, {}, {"MODEL_DATA_DIR": "/data/cifar"})
    ({'data_dir': '/data/cifar'}, ['MODEL_DATA_DIR=/data/cifar from the environment'])
    >>> resolve_data_dir(Reader, {"data_dir": "here"}, {"MODEL_DATA_DIR": "/data/cifar"})
    ({'data_dir': 'here'}, [])
    """
    value = environ.get(DATA_DIR_ENV, "").strip()
    reads_data_dir = "data_dir" in getattr(model_cls, "defaults", {}) or not callable(
        getattr(model_cls, "validate_options", None))
    if not value or "data_dir" in model_options or not reads_data_dir:
        return dict(model_options), []
    return {**model_options, "data_dir": value}, [f"{DATA_DIR_ENV}={value} from the environment"]


def resolve_paths(rule_name: str, options: SessionOptions, cwd: str) -> SessionOptions:
    """RUN_DIR, CHECKPOINT_DIR and RESUME as absolute paths (RUN_DIR defaults to ``runs/RULE-TIME-PID``, the
    checkpoints to ``RUN_DIR/checkpoints``); RESUME pre-loaded, refusing unsafe or foreign files before any rank
    starts and skipping a damaged newest one."""
    run_dir = options.run_dir
    if run_dir is None:
        run_dir = os.path.join("runs", f"{rule_name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    run_dir = os.path.join(cwd, run_dir)
    checkpoint_dir = os.path.join(cwd, options.checkpoint_dir or os.path.join(run_dir, "checkpoints"))
    resume = options.resume
    if resume:
        path, payload = load_newest_intact(os.path.join(cwd, resume))
        if payload["rule"] != rule_name:
            raise ConfigError(f"RESUME={str(path)!r} is a {payload['rule']} checkpoint, not {rule_name}")
        resume = str(path)
    return options.replace(run_dir=run_dir, checkpoint_dir=checkpoint_dir, resume=resume)


def start_session(spec: SessionSpec, ranks: list[RankSpec]) -> MpiexecRun:
    """Claim the run directory (one session at a time, stale rank status cleared), write the spec
    into it and start mpiexec. ConfigError if the directory is busy or a path is not writable."""
    run_dir = Path(spec.run_dir)
    claim = claim_run_dir(run_dir)
    try:
        options = spec.options
        if options.checkpoint_every and options.checkpoint_dir:
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
