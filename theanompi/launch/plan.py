"""The launch side of a session: check everything a session needs and plan its ranks
(:func:`plan_session`, nothing started), then claim the run directory and start mpiexec
(:func:`start_session`). ``BSP().init(...)`` and ``tmlauncher`` are these two steps.

A fresh session sets aside the records an earlier one left in its RUN_DIR (and the
checkpoints in the CHECKPOINT_DIR it writes); a resumed one continues them
(:mod:`theanompi.session.run_records`). A session resumed from a checkpoint that
already holds all N_EPOCHS starts no rank: one line says so, and the checkpoint's
model is written as the final model (:class:`TrainedAtLaunch`).

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

import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from theanompi.backend.compute import check_compute
from theanompi.backend.pytensor_config import configure_pytensor
from theanompi.core.devices import check_local_devices, parse_devices
from theanompi.core.errors import ConfigError
from theanompi.core.option_checks import (
    check_elastic,
    check_installed,
    check_lr_schedule,
    check_model_reference,
    check_ranks_per_host,
    check_worker_loss,
)
from theanompi.core.options import parse_model_options
from theanompi.core.safe_io import atomic_write_text
from theanompi.core.session_options import MAX_SESSION_RANKS, SessionOptions
from theanompi.launch.command_line import fit_command_line
from theanompi.launch.mpiexec import MpiexecRun, mpiexec_command, mpiexec_env, terminal_columns
from theanompi.launch.resume_plan import adapt_to_checkpoint
from theanompi.models.contract import check_model_class
from theanompi.models.loader import load_model_class
from theanompi.rules.base import Rule
from theanompi.runtime.records import save_final_arrays
from theanompi.session.checkpoint import final_params, load_checkpoint, load_newest_intact, nothing_to_train
from theanompi.session.run_dir import RunDirClaim, claim_run_dir
from theanompi.session.run_records import set_aside_checkpoints, set_aside_records, trim_records
from theanompi.session.spec import RankSpec, SessionSpec

log = logging.getLogger(__name__)
#: where the app contexts go when they do not fit a command line (theanompi.launch.command_line)
APP_FILE = "mpiexec.app"


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
    check_installed("TENSORBOARD", options.tensorboard, "tensorboard")
    check_lr_schedule(options)
    check_local_devices(devices)
    check_compute(devices, options.compute)  # cuda devices compute through JAX
    model_cls = load_model(request.modelfile, request.modelclass, cwd)
    model_options, data_notes = resolve_data_dir(model_cls, request.model_options)
    validate_options = getattr(model_cls, "validate_options", None)
    if callable(validate_options):
        validate_options(model_options)
    options, notes = rule.adapt_to_model(model_cls, options, request.given)
    notes = notes + data_notes
    ranks = rule.launch_ranks(devices, options)
    check_ranks(ranks, options.max_ranks_per_host)
    worker_devices = [str(r.device) for r in ranks if r.role == "worker"]
    check_elastic(options, len(worker_devices), cwd)
    options, payload = resolve_paths(rule.name, options, cwd)
    resume_point, slots = None, None
    if payload is not None:
        slots, adapted, resume_notes, global_batch = adapt_to_checkpoint(
            rule.name, payload, worker_devices, options.lr_scaling, model_options,
            "batch_size" in (getattr(model_cls, "option_table", None) or {}))
        if adapted != model_options and callable(validate_options):
            validate_options(adapted)
        model_options, notes = adapted, notes + resume_notes
        resume_point = checkpoint_resume_point(payload, global_batch)
    spec = SessionSpec(
        rule=rule.name, devices=[str(d) for d in devices], modelfile=request.modelfile,
        modelclass=request.modelclass, options=options, model_options=model_options,
        ranks=[{"role": r.role, "device": str(r.device)} for r in ranks], cwd=cwd, notes=notes,
        resume_point=resume_point, resume_slots=slots,
    )
    return spec, ranks


def checkpoint_resume_point(payload: dict[str, Any], global_batch: int = 0) -> dict[str, Any]:
    """Where a resumed session continues (``SessionSpec.resume_point``): the checkpoint's epoch and iteration (the
    records past them are trimmed), BSP's kept ``global_batch`` (LR_SCALING=none at a new size) and, for EASGD,
    ``worker_iterations``: each worker's own steps (its records trimmed to them).

    >>> checkpoint_resume_point({"epoch": 2, "iteration": 30, "worker_iterations": [16, 14]})
    {'epoch': 2, 'iteration': 30, 'worker_iterations': [16, 14]}
    """
    point: dict[str, Any] = {"epoch": int(payload["epoch"]), "iteration": int(payload["iteration"])}
    if global_batch:
        point["global_batch"] = global_batch
    if isinstance(payload.get("worker_iterations"), list):
        point["worker_iterations"] = [int(steps) for steps in payload["worker_iterations"]]
    return point


def check_ranks(ranks: list[RankSpec], max_per_host: int) -> None:
    """No host gets more ranks than MAX_RANKS_PER_HOST, the session no more than MAX_SESSION_RANKS (ConfigError
    naming DEVICES: an allocation's counts were checked where they were read, naming their place)."""
    if len(ranks) > MAX_SESSION_RANKS:
        raise ConfigError(f"DEVICES: {len(ranks)} ranks, more than a session's {MAX_SESSION_RANKS}")
    per_host = Counter("" if r.device.is_local else r.device.host for r in ranks)
    check_ranks_per_host(per_host.items(), max_per_host)


def load_model(modelfile: str, modelclass: str, cwd: str) -> type:
    """The ModelClass MODELFILE and MODELCLASS name, imported as the ranks will import it (pytensor configured
    first) and checked against the contract; ConfigError (or ContractError) in one line."""
    check_model_reference(modelfile, modelclass)
    if "pytensor" not in sys.modules:
        configure_pytensor()  # the model module may import pytensor: same cache and backend
    model_cls = load_model_class(modelfile, modelclass, cwd)
    check_model_class(model_cls)
    return model_cls


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


def resolve_paths(rule_name: str, options: SessionOptions, cwd: str) -> tuple[SessionOptions, dict[str, Any] | None]:
    """RUN_DIR, CHECKPOINT_DIR and RESUME as absolute paths (RUN_DIR defaults to ``runs/RULE-TIME-PID``, the
    checkpoints to ``RUN_DIR/checkpoints``); RESUME pre-loaded, refusing unsafe or foreign files before any rank
    starts and skipping a damaged newest one. Returns the options and, with RESUME, its checkpoint."""
    run_dir = options.run_dir
    if run_dir is None:
        run_dir = os.path.join("runs", f"{rule_name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    run_dir = os.path.join(cwd, run_dir)
    checkpoint_dir = os.path.join(cwd, options.checkpoint_dir or os.path.join(run_dir, "checkpoints"))
    resume, payload = options.resume, None
    if resume:
        path, payload = load_newest_intact(os.path.join(cwd, resume))
        if payload["rule"] != rule_name:
            raise ConfigError(f"RESUME={str(path)!r} is a {payload['rule']} checkpoint, not {rule_name}")
        resume = str(path)
    return options.replace(run_dir=run_dir, checkpoint_dir=checkpoint_dir, resume=resume), payload


class SessionRun(Protocol):
    """A started session as the handles and ``tmlauncher`` see it (:class:`MpiexecRun`, :class:`TrainedAtLaunch`)."""

    code: int | None
    failure: str | None
    lost: list[str]

    def wait(self) -> int: ...

    def remote_ends(self) -> list[str]: ...


class TrainedAtLaunch:
    """A resumed session whose checkpoint already holds every epoch: nothing ran, and :meth:`wait` is 0 at once.

    Example
    -------
    >>> TrainedAtLaunch().wait(), TrainedAtLaunch().remote_ends()
    (0, [])
    """

    def __init__(self) -> None:
        self.code: int | None = 0
        self.failure: str | None = None
        self.lost: list[str] = []

    def wait(self) -> int:
        return 0

    def remote_ends(self) -> list[str]:
        return []


def trained_already(spec: SessionSpec) -> bool:
    """Whether RESUME's checkpoint already completed N_EPOCHS (known at launch only when N_EPOCHS is given:
    otherwise the model's ``n_epochs`` decides, on the ranks)."""
    point, n_epochs = spec.resume_point, spec.options.n_epochs
    return point is not None and n_epochs is not None and point["epoch"] + 1 >= n_epochs


def _write_checkpoint_as_final_model(spec: SessionSpec) -> Path:
    """RUN_DIR/final_params.npz and summary.json of a session with nothing to train, from its checkpoint."""
    resume = str(spec.options.resume)
    payload = load_checkpoint(resume)
    path = save_final_arrays(final_params(payload), spec.run_dir)
    summary = {"rule": spec.rule, "epochs": 0, "checkpoint_epochs": int(payload["epoch"]) + 1,
               "n_epochs": spec.options.n_epochs, "resumed_from": resume, "final_params": str(path),
               "iterations": int(payload["iteration"]), "final_val_accuracy": None}
    atomic_write_text(Path(spec.run_dir) / "summary.json", json.dumps(summary, indent=2))
    return path


def _prepare_records(spec: SessionSpec) -> None:
    """A fresh session sets aside an earlier session's records (and the checkpoints where it writes its own); a
    resumed one drops the records past its checkpoint and appends. Nothing is followed through a link; what cannot
    be done is a ConfigError naming the directory."""
    options, run_dir = spec.options, Path(spec.run_dir)
    try:
        if spec.resume_point is not None:
            trim_records(run_dir, spec.resume_point)
            return
        moved = set_aside_records(run_dir)
        if moved is not None:
            log.info("RUN_DIR held the records of an earlier session: moved to %s", moved)
        if options.checkpoint_every and options.checkpoint_dir:
            moved = set_aside_checkpoints(Path(options.checkpoint_dir))
            if moved is not None:
                log.info("CHECKPOINT_DIR held the checkpoints of an earlier session: moved to %s", moved)
    except OSError as err:
        what = "trimmed to the checkpoint" if spec.resume_point is not None else "set aside"
        raise ConfigError(f"RUN_DIR={str(run_dir)!r}: the earlier session's records cannot be {what}: "
                          f"{err.strerror or err}{f' ({err.filename})' if err.filename else ''}; give this user "
                          "write access there, or choose another RUN_DIR") from None


def session_argv(spec: SessionSpec, ranks: list[RankSpec]) -> list[str]:
    """The mpiexec command line of a planned session: what :func:`start_session` runs and ``tmlauncher --dry-run``
    prints. Where this process's stdout is a terminal, rank 0 draws a progress bar that wide (PROGRESS_EVERY > 0)."""
    options = spec.options
    return mpiexec_command(ranks, str(spec.run_dir / "session.json"), bind=options.bind, threads=options.threads,
                           fault_tolerant=options.on_worker_loss == "continue",
                           progress_columns=terminal_columns() if options.progress_every else 0)


def start_session(spec: SessionSpec, ranks: list[RankSpec]) -> SessionRun:
    """Claim the run directory (one session at a time, stale rank status cleared) and the checkpoint directory
    it writes, prepare the records (:func:`_prepare_records`), write the spec into it and start mpiexec.
    ConfigError if a directory is busy or a path is not writable. A resumed session with nothing left to
    train (:func:`trained_already`) writes its checkpoint's model as the final one instead."""
    run_dir = Path(spec.run_dir)
    options = spec.options
    writes = Path(options.checkpoint_dir) if options.checkpoint_every and options.checkpoint_dir else None
    claim = claim_run_dir(run_dir, checkpoint_dir=writes, fresh=spec.resume_point is None)
    try:
        _prepare_records(spec)
        if trained_already(spec):
            return _finish_at_launch(spec, claim)
        spec_path = run_dir / "session.json"
        try:
            spec.save(spec_path)
        except OSError as err:
            raise ConfigError(f"RUN_DIR={str(run_dir)!r}: {spec_path.name} cannot be written: "
                              f"{err.strerror or err}") from None
        env = mpiexec_env(options.startup_timeout)
        argv, app_text = fit_command_line(session_argv(spec, ranks), env, str(run_dir / APP_FILE))
        if app_text is not None:  # too many different app contexts for a command line
            atomic_write_text(run_dir / APP_FILE, app_text, label="RUN_DIR")
        notes = "".join(f"; {note}" for note in spec.notes)
        log.info("starting %d ranks: %s%s", len(ranks), ", ".join(str(r.device) for r in ranks), notes)
        return MpiexecRun(argv, run_dir, ranks, claim=claim, silence_limit=options.watchdog,
                          startup_timeout=options.startup_timeout, env=env)
    except BaseException:
        claim.release()
        raise


def _finish_at_launch(spec: SessionSpec, claim: RunDirClaim) -> TrainedAtLaunch:
    """Write the checkpoint's model as the final one, say so in one line, let the directories go."""
    assert spec.resume_point is not None and spec.options.n_epochs is not None
    try:
        path = _write_checkpoint_as_final_model(spec)
    except OSError as err:
        raise ConfigError(f"RUN_DIR={str(spec.run_dir)!r}: the final model cannot be written: "
                          f"{err.strerror or err}") from None
    finally:
        claim.release()
    log.info("%s (%s)", nothing_to_train(str(spec.options.resume), spec.resume_point["epoch"] + 1,
                                         spec.options.n_epochs), path)
    return TrainedAtLaunch()
