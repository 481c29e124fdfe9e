"""WorkerLoop: the epoch loop of every rule's workers, and the checkpoints they take and resume from.

A rule's worker is a subclass. Its rank loop builds everything the loop works on first -- the rule's
communicators, the compiled model, its fused parameters, the recorder
(:func:`theanompi.runtime.model_build.build_worker`) -- and constructs the worker with them, so no field is ever
"not built yet"; :meth:`WorkerLoop.run` then resumes a checkpoint if asked, takes the rule's start
(:meth:`WorkerLoop.start_rule`), trains and ends the session.
Epoch records, progress lines and the final model are :mod:`theanompi.runtime.records`'s.

Example (inside a rule's rank loop)
-------
>>> built = build_worker(ctx, ctx.comm, "local", "host", Recorder(ctx.spec.run_dir, write=True))   # doctest: +SKIP
>>> LocalOnly(ctx, ctx.comm, built, ctx.options).run()                                            # doctest: +SKIP
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from theanompi.comm.fused_params import FusedParams
from theanompi.comm.param_access import assign, current_value, host_copy
from theanompi.core.errors import ContractError, NonFiniteError
from theanompi.core.session_options import SessionOptions
from theanompi.runtime.epoch_progress import EpochProgress
from theanompi.runtime.model_build import BuiltWorker
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.records import Progress, end_session, epoch_metrics
from theanompi.session.checkpoint import load_checkpoint, nothing_to_train, save_checkpoint
from theanompi.session.recorder import Recorder
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")

OptionsT = TypeVar("OptionsT", bound=SessionOptions)


class WorkerLoop(Generic[OptionsT]):
    """The epoch/iteration skeleton every rule's worker runs; rules fill in the hooks.

    Subclasses override :meth:`start_rule` (the rule's collective start: agreement checks, the common starting
    point), :meth:`step` (one iteration, exchanges included), :meth:`end_of_epoch` (e.g. a final average),
    :meth:`stop_requested` (e.g. a server said stop) and :meth:`finish` (e.g. drain messages, build the final model).

    The constructor only stores what it is given, all of it built already (:class:`BuiltWorker`); ``comm`` is the
    communicator of the *workers* (rules with server ranks split them off first): validation and progress are
    aggregated over it. ``options`` are the session's, as the rule's options class (``BSPOptions``, ...).
    """

    rule_name: ClassVar[str] = ""

    def __init__(self, ctx: RankContext, comm: Any, built: BuiltWorker, options: OptionsT):
        self.ctx = ctx
        self.comm = comm
        self.options = options
        self.model: Any = built.model
        self.fused: FusedParams = built.fused
        self.recorder: Recorder = built.recorder
        self.n_epochs = built.n_epochs
        self.average = built.average  # AVERAGE_WEIGHTS=ema: the worker's moving average (None when off)
        self.iteration = 0
        self.epoch = 0
        self.start_epoch = 0
        self.restored: dict[str, Any] | None = None  # the checkpoint resumed from (rules read their extras from it)
        self.restored_worker = 0  # the worker whose entries of that checkpoint this worker took
        #: the progress inside each epoch, on the worker that prints the epoch lines (set by :meth:`run`)
        self.epoch_progress: EpochProgress | None = None

    def start(self) -> None:
        """Everything before the first step: the records' TensorBoard events (TENSORBOARD), a checkpoint to resume
        (RESUME), then the rule's start."""
        self.recorder.open_board(self.ctx.spec)
        if self.options.resume:
            self.start_epoch = self.restore(self.options.resume)
        self.start_rule()
        if self.average is not None:
            self.average.begin()

    def start_rule(self) -> None:
        """Rule hook, the last step before training: agreement checks, the common start, the rule's state."""

    # checkpoints -----------------------------------------------------------------------
    def state_vars(self) -> list[Any]:
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
        if self.average is not None and payload.get("worker_average"):
            self.average.load(payload["worker_average"][slot])
        self.iteration = int(payload["iteration"])
        self.recorder.iteration = self.iteration
        if self.comm.rank == 0:
            log.info("resumed from %s after epoch %d", path, int(payload["epoch"]) + 1)
        return int(payload["epoch"]) + 1

    def save_checkpoint(self, epoch: int) -> None:
        """Collective: worker 0 writes every worker's params and state after ``epoch``."""
        mine = ([host_copy(p) for p in self.model.params], [host_copy(v) for v in self.state_vars()],
                self.rule_state(), self.average.state() if self.average is not None else None)
        with ACTIVITY.waiting("gathering a checkpoint"):
            gathered = self.comm.gather(mine, root=0)
        if self.comm.rank == 0:
            ACTIVITY.enter("writing a checkpoint")
            path = save_checkpoint(self.options.checkpoint_dir, {
                "rule": self.rule_name, "epoch": epoch, "iteration": self.iteration, "n_workers": self.comm.size,
                "seed": self.options.seed,
                "worker_params": [g[0] for g in gathered], "worker_state": [g[1] for g in gathered],
                "worker_rule_state": [g[2] for g in gathered],
                **({"worker_average": [g[3] for g in gathered]} if self.average is not None else {}),
            })
            log.info("checkpoint: %s", path)

    def check_finite(self, flat: Any, what: str, span: tuple[int, int] | None = None) -> None:
        """Raise NonFiniteError naming this rank and the parameter if ``flat`` (or its ``span``, ``(start, stop)``)
        holds NaN/Inf (CHECK_FINITE)."""
        if not self.options.check_finite:
            return
        bad = self.fused.non_finite(flat, span)
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

    # averaged weights (AVERAGE_WEIGHTS=ema) ----------------------------------------------
    def update_average(self) -> None:
        """After every step: fold the model into the worker's average (a step of N workers' batches). Rules whose
        average is kept elsewhere, or at other times, override it."""
        if self.average is not None:
            self.average.update(self.comm.size, self.epoch)

    def averaged_model(self) -> Any:
        """A context manager that puts the averaged model in place of the model's own (to validate it), or None when
        AVERAGE_WEIGHTS is off."""
        return self.average.in_model(self.comm) if self.average is not None else None

    def adopt_average(self) -> None:
        """Before the final model is saved: the averaged weights become the model's (AVERAGE_WEIGHTS=ema)."""
        if self.average is not None:
            self.average.adopt()

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
        n_steps = self.model.data.n_batch_train
        progress = self.epoch_progress
        if progress is not None:
            progress.begin(epoch, n_steps)
        try:
            for count in range(n_steps):
                self.step(count)
                self.update_average()
                ACTIVITY.progress()
                self.recorder.end_iteration()
                self.iteration += 1
                if progress is not None:  # rank 0's samples stand for every worker's (each step takes a batch)
                    progress.advance(count + 1, int(self.recorder.train_sums()[2]) * self.comm.size)
                if self.stop_requested():
                    return False
        finally:
            if progress is not None:
                progress.end()
        return True

    def run(self) -> None:
        """Start (:meth:`start`), train ``n_epochs`` epochs (validating after each), then end the session --
        at once when a resumed checkpoint holds them all (its model is the final model)."""
        self.start()
        if self.start_epoch >= self.n_epochs and self.comm.rank == 0:
            log.info("%s", nothing_to_train(str(self.options.resume), self.start_epoch, self.n_epochs))
        progress = Progress(self.n_epochs, self.start_epoch) if self.comm.rank == 0 else None
        if progress is not None:
            self.epoch_progress = EpochProgress.for_this_rank(self.n_epochs, self.options.progress_every)
        every = self.options.checkpoint_every
        for epoch in range(self.start_epoch, self.n_epochs):
            self.epoch = epoch
            completed = self.train_epoch(epoch)
            ACTIVITY.enter("the epoch's end")
            self.end_of_epoch(epoch)
            if callable(getattr(self.model, "sync_state", None)):
                self.model.sync_state(self.comm)
            metrics = epoch_metrics(self.model, self.recorder, self.comm, epoch, progress, self.averaged_model)
            self.recorder.end_epoch(epoch, metrics)
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
        self.adopt_average()
        with ACTIVITY.waiting("gathering the workers' records"):
            per_worker = self.comm.gather(self.worker_record(), root=0)
        summary = None
        if self.comm.rank == 0:
            summary = {"rule": self.rule_name, "workers": self.comm.size, "iterations": self.iteration,
                       **self.summary(), "per_worker": per_worker}
        end_session(self.model, self.recorder, self.ctx.spec.run_dir, summary, plots=self.options.plots)
