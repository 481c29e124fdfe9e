"""Rank-side pieces every rule's loop shares: model construction, agreement checks and
:class:`WorkerLoop`, the epoch loop of every rule's workers. Epoch records, progress lines
and the final model are :mod:`theanompi.session_records`'s (re-exported here).

Example (inside a rule's ``run_rank``)
-------
>>> model = build_model(ctx, worker_rank=0, n_workers=2, sync_type="cdd")   # doctest: +SKIP
>>> check_agreement(comm, n_params=1234)                                    # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from theanompi import rank_context
from theanompi.checkpoint import load_checkpoint, save_checkpoint
from theanompi.contract import WorkerConfig, check_model_instance
from theanompi.errors import ContractError, NonFiniteError
from theanompi.model_loader import load_model_class
from theanompi.param_access import assign, current_value, host_copy
from theanompi.params import FusedParams
from theanompi.recorder import Recorder
from theanompi.session_options import SessionOptions
from theanompi.session_records import (  # noqa: F401  (re-exported: rules and tests import them from here)
    Progress,
    allreduce_sums,
    end_session,
    epoch_metrics,
    format_duration,
    load_final_params,
    save_final_params,
    train_metrics,
    validate,
)
from theanompi.theano_mpi_contract import TheanoMPIModel, follows_theanompi_contract
from theanompi.watchdog import ACTIVITY

log = logging.getLogger("theanompi")

DEFAULT_EPOCHS = 10


def build_model(ctx, worker_rank: int, n_workers: int, sync_type: str | None):
    """Construct the session's ModelClass for one worker, check the contract, compile."""
    spec = ctx.spec
    ACTIVITY.enter("building the model")
    ACTIVITY.progress("importing")
    cls = load_model_class(spec.modelfile, spec.modelclass, spec.cwd)
    ACTIVITY.progress("constructing")
    config = WorkerConfig(
        rank=worker_rank, size=n_workers, seed=ctx.options.seed, device=ctx.device,
        sync_type=sync_type, options=ctx.options, model_options=dict(spec.model_options),
        run_dir=Path(spec.run_dir), model_name=spec.modelclass,
    )
    rank_context.set_current(config)  # Theano-MPI-style DataClasses and lib.opt read it
    model = cls(config)
    if follows_theanompi_contract(model):
        model = TheanoMPIModel(model, config)
    check_model_instance(model, sync_type)
    ACTIVITY.progress("compiling")
    model.compile_iter_fns(sync_type)
    ACTIVITY.enter("setting up")
    return model


def n_epochs_for(model, options: dict[str, Any]) -> int:
    """N_EPOCHS if given, else the model's ``n_epochs`` attribute, else 10."""
    return int(options.n_epochs or getattr(model, "n_epochs", None) or DEFAULT_EPOCHS)


def check_agreement(comm, **facts: Any) -> None:
    """Raise ContractError on every rank if ranks disagree on any fact (before exchanging)."""
    with ACTIVITY.waiting("an agreement check"):
        gathered = comm.allgather(facts)
    for key in facts:
        values = [g[key] for g in gathered]
        if any(v != values[0] for v in values):
            listing = ", ".join(f"rank {r} has {v!r}" for r, v in enumerate(values))
            raise ContractError(f"workers disagree on {key}: {listing}")


class WorkerLoop:
    """The epoch/iteration skeleton every rule's worker runs; rules fill in the hooks.

    Subclasses set :attr:`sync_type` (what the model compiles) and override
    :meth:`step` (one iteration, exchanges included), :meth:`end_of_epoch`
    (e.g. a final average), :meth:`stop_requested` (e.g. a server said stop) and
    :meth:`finish` (e.g. drain messages, build the final model).

    The constructor only stores its arguments; :meth:`run` starts with :meth:`setup`
    (build and compile the model, restore a checkpoint), which rules extend through
    :meth:`setup_before_model` (e.g. open their communicators) and :meth:`setup_rule`
    (agreement checks, the common starting point).

    ``comm`` is the communicator of the *workers* (rules with server ranks split
    them off in :meth:`setup_before_model`); validation and progress are aggregated over it.

    Example
    -------
    >>> class LocalOnly(WorkerLoop):
    ...     sync_type = "local"
    >>> LocalOnly(ctx, ctx.comm).run()        # doctest: +SKIP
    """

    sync_type: str | None = "local"
    rule_name: str = ""
    #: where the fused buffer lives: "host" (NumPy) or "device" (where the params are: CuPy on a GPU)
    fused_location: str = "host"

    def __init__(self, ctx, comm):
        self.ctx = ctx
        self.comm = comm
        self.model = None
        self.fused: FusedParams | None = None
        self.recorder: Recorder | None = None
        self.n_epochs = 0
        self.iteration = 0
        self.epoch = 0
        self.start_epoch = 0
        self.restored: dict | None = None  # the checkpoint resumed from (rules read their extras from it)
        self.restored_worker = 0  # the worker whose entries of that checkpoint this worker took
        self.is_set_up = False

    def setup(self) -> None:
        """Everything before the first step (once; :meth:`run` calls it): the rule's communicators, the
        compiled model, its fused params, the recorder, a checkpoint to resume, the rule's start."""
        if self.is_set_up:
            return
        self.is_set_up = True
        self.setup_before_model()
        build_start = time.perf_counter()
        self.model = build_model(self.ctx, self.comm.rank, self.comm.size, self.sync_type)
        self.fused = FusedParams(self.model.params, where=self.fused_location)
        self.recorder = self.make_recorder()
        self.recorder.record_phase("compile", time.perf_counter() - build_start)  # model build and compile
        self.n_epochs = n_epochs_for(self.model, self.options)
        if self.options.resume:
            self.start_epoch = self.restore(self.options.resume)
        self.setup_rule()

    def setup_before_model(self) -> None:
        """Rule hook, first step of :meth:`setup`: what building the model needs (e.g. ``self.comm``)."""

    def setup_rule(self) -> None:
        """Rule hook, last step of :meth:`setup`: agreement checks, the common start, the rule's state."""

    @property
    def options(self) -> SessionOptions:
        """The session's options, typed and frozen (``ctx.options``)."""
        return self.ctx.options

    def make_recorder(self) -> Recorder:
        """This worker's Recorder (called once by :meth:`setup`): worker 0 writes the run's records."""
        return Recorder(self.ctx.spec.run_dir, write=self.comm.rank == 0)

    # checkpoints -----------------------------------------------------------------------
    def state_vars(self) -> list:
        """The model's checkpointed extra state (``model.state_vars``, e.g. optimizer velocities)."""
        return list(getattr(self.model, "state_vars", []))

    def rule_state(self) -> dict[str, Any]:
        """This worker's rule state saved in a checkpoint (e.g. a GOSGD weight); ``{}`` by default."""
        return {}

    def restore(self, path: str) -> int:
        """Load a checkpoint into this worker (before any exchange); returns the epoch to start at."""
        payload = load_checkpoint(path)
        n_saved = int(payload["n_workers"])
        slot = self.comm.rank if n_saved == self.comm.size else 0
        self.restored, self.restored_worker = payload, slot
        if n_saved != self.comm.size and self.comm.rank == 0:
            log.warning("checkpoint of %d workers resumed with %d: every worker starts from worker 0's state",
                        n_saved, self.comm.size)
        params, state = payload["worker_params"][slot], payload["worker_state"][slot]
        targets = [("params", list(self.model.params), params), ("state_vars", self.state_vars(), state)]
        for what, variables, values in targets:
            if what == "state_vars" and len(values) == 0:
                continue  # a worker lost before its snapshot (EASGD): fresh optimizer state
            if len(variables) != len(values):
                raise ContractError(f"RESUME={path!r}: the checkpoint has {len(values)} {what}, "
                                    f"the model {len(variables)}")
            for i, (var, value) in enumerate(zip(variables, values)):
                current = current_value(var)
                if np.shape(current) != np.shape(value):
                    raise ContractError(f"RESUME={path!r}: {what}[{i}] has shape {np.shape(value)} in the checkpoint, "
                                        f"{np.shape(current)} in the model")
                assign(var, np.asarray(value, dtype=getattr(current, "dtype", None)))
        self.iteration = int(payload["iteration"])
        self.recorder.iteration = self.iteration
        if self.comm.rank == 0:
            log.info("resumed from %s after epoch %d", path, int(payload["epoch"]) + 1)
        return int(payload["epoch"]) + 1

    def save_checkpoint(self, epoch: int) -> None:
        """Collective: worker 0 writes every worker's params and state after ``epoch``."""
        mine = ([host_copy(p) for p in self.model.params], [host_copy(v) for v in self.state_vars()],
                self.rule_state())
        with ACTIVITY.waiting("gathering a checkpoint"):
            gathered = self.comm.gather(mine, root=0)
        if self.comm.rank == 0:
            ACTIVITY.enter("writing a checkpoint")
            path = save_checkpoint(self.options.checkpoint_dir, {
                "rule": self.rule_name, "epoch": epoch, "iteration": self.iteration, "n_workers": self.comm.size,
                "seed": self.options.seed,
                "worker_params": [g[0] for g in gathered], "worker_state": [g[1] for g in gathered],
                "worker_rule_state": [g[2] for g in gathered],
            })
            log.info("checkpoint: %s", path)

    def check_finite(self, flat, what: str) -> None:
        """Raise NonFiniteError naming this rank and the parameter if ``flat`` holds NaN/Inf (CHECK_FINITE)."""
        if not self.options.check_finite:
            return
        bad = self.fused.non_finite(flat)
        if bad is not None:
            raise NonFiniteError(f"NaN or Inf in the {what} of parameter {bad} on worker {self.comm.rank} "
                                 f"(session rank {self.ctx.rank}) at iteration {self.iteration}; "
                                 "stopping before it reaches the other workers")

    # hooks ---------------------------------------------------------------------------
    def step(self, count: int) -> None:
        """One iteration: by default the model's whole local step."""
        with self.recorder.timer("calc"):
            self.model.train_iter(count, self.recorder)

    def end_of_epoch(self, epoch: int) -> None:
        """After the epoch's last step, before validation."""

    def before_checkpoint(self, epoch: int) -> None:
        """Collective, before a checkpoint is saved: e.g. receive the messages still in flight."""

    def stop_requested(self) -> bool:
        """True ends training early (checked after every step)."""
        return False

    def finish(self) -> None:
        """After the last epoch (or a stop), before the final model is saved."""

    def summary(self) -> dict[str, Any]:
        """Rule-specific entries of ``summary.json`` (called on worker 0 only)."""
        return {}

    def worker_record(self) -> dict[str, Any]:
        """This worker's entry of ``summary.json``'s ``per_worker`` list; rules add their counters."""
        return {"iterations": self.iteration, **{f"{k}_s": round(v, 6) for k, v in self.recorder.totals.items()}}

    # the session -----------------------------------------------------------------------
    def train_epoch(self, epoch: int) -> bool:
        """Run one epoch's steps; False if a stop was requested."""
        ACTIVITY.enter("training")
        self.model.adjust_hyperp(epoch)
        data = self.model.data
        if callable(getattr(data, "set_epoch", None)) and getattr(data, "epoch", None) != epoch:
            data.set_epoch(epoch)  # a model that forgot it would reuse one shuffle every epoch
        for count in range(self.model.data.n_batch_train):
            self.step(count)
            ACTIVITY.progress()
            self.recorder.end_iteration()
            self.iteration += 1
            if self.stop_requested():
                return False
        return True

    def run(self) -> None:
        """Set up, train ``n_epochs`` epochs (validating after each), then end the session."""
        self.setup()
        progress = Progress(self.n_epochs) if self.comm.rank == 0 else None
        every = self.options.checkpoint_every
        for epoch in range(self.start_epoch, self.n_epochs):
            self.epoch = epoch
            completed = self.train_epoch(epoch)
            ACTIVITY.enter("the epoch's end")
            self.end_of_epoch(epoch)
            if callable(getattr(self.model, "sync_state", None)):
                self.model.sync_state(self.comm)
            self.recorder.end_epoch(epoch, epoch_metrics(self.model, self.recorder, self.comm, epoch, progress))
            if every and (epoch + 1) % every == 0:
                self.before_checkpoint(epoch)
                self.save_checkpoint(epoch)
            if not completed:
                break
        self.end_session()

    def end_session(self) -> None:
        """The rule's :meth:`finish`, then every worker's record gathered to worker 0, which writes the
        final model and ``summary.json``; every worker closes its recorder and cleans its model up."""
        ACTIVITY.enter("finishing")
        self.finish()
        with ACTIVITY.waiting("gathering the workers' records"):
            per_worker = self.comm.gather(self.worker_record(), root=0)
        summary = None
        if self.comm.rank == 0:
            summary = {"rule": self.rule_name, "workers": self.comm.size, "iterations": self.iteration,
                       **self.summary(), "per_worker": per_worker}
        end_session(self.model, self.recorder, self.ctx.spec.run_dir, summary, plots=self.options.plots)
