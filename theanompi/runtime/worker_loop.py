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
from contextlib import AbstractContextManager, nullcontext
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
from theanompi.session.checkpoint import consensus, load_checkpoint, nothing_to_train, resume_position
from theanompi.session.checkpoint_writer import CheckpointWriter
from theanompi.session.rank_status import stop_requested, write_stopped
from theanompi.session.recorder import Recorder
from theanompi.session.run_dir import owning_root
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")

OptionsT = TypeVar("OptionsT", bound=SessionOptions)
#: a checkpoint's entries of model size, which worker 0 keeps (each worker gets its own share of them)
BULK_ENTRIES = ("worker_params", "worker_state", "centre", "table")


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
    #: whether the workers take CHECKPOINT_EVERY_ITERS's checkpoints themselves (EASGD's server takes its own)
    checkpoints_inside_epochs: ClassVar[bool] = True

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
        #: the worker whose entries of that checkpoint this worker took (None: it joined, from the workers' model)
        self.restored_worker: int | None = 0
        #: the session stopped at a checkpoint because the launcher asked (an elastic session grows)
        self.stopped_for_restart = False
        self._writer: CheckpointWriter | None = None  # made at the first checkpoint
        #: the progress inside each epoch, on the worker that prints the epoch lines (set by :meth:`run`)
        self.epoch_progress: EpochProgress | None = None
        self._bytes_sent_before_epoch = 0  # bytes_sent() when the epoch began

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

    def checkpoint_slot(self, n_saved: int, rank: int) -> int | None:
        """The checkpoint's worker whose state worker ``rank`` continues: the launcher's choice
        (``spec.resume_slots``: an elastic restart keeps each surviving worker's own), else the same worker where the
        checkpoint has it; None: the worker joins."""
        slots = self.ctx.spec.resume_slots
        if slots is not None and len(slots) == self.comm.size:
            slot = slots[rank]
            return slot if slot is not None and 0 <= slot < n_saved else None
        return rank if rank < n_saved else None

    def resumed_state(self, payload: dict[str, Any], slot: int | None) -> tuple[list[Any], list[Any]]:
        """(params, state_vars) this worker resumes: its slot's, or for a worker that joins the workers' common
        model (:func:`~theanompi.session.checkpoint.consensus`: EASGD's centre, GOSGD's weighted consensus, the
        workers' mean) with a fresh optimizer state. Rules change what a world-size change means."""
        if slot is None:
            return consensus(payload)[0], []
        return payload["worker_params"][slot], payload["worker_state"][slot]

    def world_size_note(self) -> str:
        """What a resume at another number of workers does to this rule's state (one clause for the log)."""
        return "workers that continue keep their state, workers that join start from the workers' model"

    def restore(self, path: str) -> int:
        """Load a checkpoint into the workers (collective, before any exchange); returns the epoch to start at (an
        epoch checkpointed inside continues at its sample, :meth:`resume_inside_epoch`).

        Worker 0 alone reads the file (the other hosts need no shared file system) and sends each worker what it
        resumes -- one model's parameters and state, not the whole checkpoint -- and the checkpoint's small entries
        (position, the rules' per-worker counters); :attr:`restored` is the whole checkpoint on worker 0, those entries
        elsewhere."""
        shares, metadata = None, None
        if self.comm.rank == 0:
            payload = load_checkpoint(path)
            n_saved = int(payload["n_workers"])
            shares = [self._share(payload, self.checkpoint_slot(n_saved, k)) for k in range(self.comm.size)]
            metadata = {key: value for key, value in payload.items() if key not in BULK_ENTRIES}
            self._log_shares(payload, shares)
        with ACTIVITY.waiting("the checkpoint's state from worker 0"):
            metadata = self.comm.bcast(metadata, root=0)
            slot, params, state = self.comm.scatter(shares, root=0)
        payload = payload if self.comm.rank == 0 else metadata
        self.restored, self.restored_worker = payload, slot
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
        if self.average is not None and payload.get("worker_average"):  # a worker that joins: worker 0's
            self.average.load(payload["worker_average"][slot if slot is not None else 0])
        self.iteration = int(payload["iteration"])
        self.recorder.iteration = self.iteration
        start_epoch, units = resume_position(payload)
        if units:
            self.resume_inside_epoch(start_epoch, units)
        if self.comm.rank == 0:
            where = f"at sample {units} of epoch {start_epoch + 1}" if units else f"after epoch {start_epoch}"
            log.info("resumed from %s %s", path, where)
        return start_epoch

    def _share(self, payload: dict[str, Any], slot: int | None) -> tuple[int | None, list[Any], list[Any]]:
        """(slot, params, state) of the worker that continues ``slot`` (None: joins)."""
        return (slot, *self.resumed_state(payload, slot))

    def _log_shares(self, payload: dict[str, Any], shares: list[tuple[int | None, list[Any], list[Any]]]) -> None:
        """Worker 0: what the resume changes, and the bytes each worker gets (against the model's parameters)."""
        n_saved = int(payload["n_workers"])
        if n_saved != self.comm.size:
            log.info("checkpoint of %d workers resumed with %d: %s", n_saved, self.comm.size, self.world_size_note())
        model = sum(np.asarray(p).nbytes for p in payload["worker_params"][0])
        sent = [sum(np.asarray(v).nbytes for v in params + state) for _, params, state in shares[1:]]
        if sent and model:
            log.info("each worker's state from the checkpoint: at most %d bytes (%.2f x the model's %d bytes of "
                     "parameters; a worker that joins: %s)", max(sent), max(sent) / model, model,
                     ", ".join(f"{b / model:.2f} x" for (slot, _, _), b in zip(shares[1:], sent) if slot is None)
                     or "none")

    def resume_inside_epoch(self, epoch: int, units: int) -> None:
        """Continue ``epoch`` after the ``units`` units of its order the checkpoint's workers consumed (the data
        re-sharded over this session's workers: :meth:`~theanompi.models.data.base.DataClass.start_at`)."""
        start_at = getattr(self.model.data, "start_at", None)
        if callable(start_at):
            start_at(epoch, units)
        elif self.comm.rank == 0:
            log.warning("the model's data cannot start inside an epoch: epoch %d starts over (its first %d samples "
                        "are trained twice)", epoch + 1, units)

    def save_checkpoint(self, epoch: int, epoch_units: int = 0) -> None:
        """Collective: worker 0 takes every worker's params and state after ``epoch`` (and ``epoch_units`` units of
        the next), then writes them in the background (:class:`CheckpointWriter`)."""
        mine = ([host_copy(p) for p in self.model.params], [host_copy(v) for v in self.state_vars()],
                self.rule_state(), self.average.state() if self.average is not None else None)
        with ACTIVITY.waiting("gathering a checkpoint"):
            gathered = self.comm.gather(mine, root=0)
        if self.comm.rank == 0:
            phase = ACTIVITY.state[0]
            ACTIVITY.enter("writing a checkpoint")
            hp = getattr(self.model, "hp", None)
            batch = int(hp.get("batch_size") or 0) if isinstance(hp, dict) else 0
            kept = (self.ctx.spec.resume_point or {}).get("global_batch")  # BSP, LR_SCALING=none, at a new size
            if self._writer is None:
                directory = str(self.options.checkpoint_dir)
                self._writer = CheckpointWriter(directory, root=owning_root(directory, self.ctx.spec.run_dir))
            self._writer.save({
                "rule": self.rule_name, "epoch": epoch, "epoch_units": epoch_units, "iteration": self.iteration,
                "n_workers": self.comm.size, "seed": self.options.seed, "worker_devices": self.worker_devices(),
                "batch_size": batch, "global_batch": int(kept or batch * self.comm.size),
                "worker_params": [g[0] for g in gathered], "worker_state": [g[1] for g in gathered],
                "worker_rule_state": [g[2] for g in gathered],
                **({"worker_average": [g[3] for g in gathered]} if self.average is not None else {}),
                **self.checkpoint_extras(),
            })
            ACTIVITY.enter(phase)

    def worker_devices(self) -> list[str]:
        """The devices of the session's workers, in worker order (a checkpoint's: a restart matches them)."""
        return [r["device"] for r in self.ctx.spec.ranks if r["role"] == "worker"]

    def checkpoint_extras(self) -> dict[str, Any]:
        """Entries a rule adds to its checkpoints (worker 0 only; e.g. ASGD's table on the servers)."""
        return {}

    def restart_requested(self) -> bool:
        """Collective, right after a checkpoint: whether the launcher asked the session to stop there (an elastic
        session restarts with more workers); worker 0 reads the request and tells the others."""
        asked = self.comm.rank == 0 and stop_requested(self.ctx.spec.run_dir)
        with ACTIVITY.waiting("the decision to stop at the checkpoint"):
            self.stopped_for_restart = bool(self.comm.bcast(asked, root=0))
        return self.stopped_for_restart

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

    def model_to_validate(self) -> AbstractContextManager[None]:
        """A context manager in which the epoch is validated: the model as it is by default; a rule whose validated
        model is not the worker's own puts it in place (BSP ``avg`` between exchanges: theta_outer)."""
        return nullcontext()

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

    def sync_inside_epoch(self) -> None:
        """Collective, before a checkpoint inside an epoch (CHECKPOINT_EVERY_ITERS): bring the workers to a
        consistent cut (e.g. ASGD's last pushes applied and pulled, GOSGD's workers met)."""

    def stop_requested(self) -> bool:
        """True ends training early (checked after every step)."""
        return False

    def finish(self) -> None:
        """After the last epoch (or a stop), before the final model is saved."""

    def summary(self) -> dict[str, Any]:
        """Rule-specific entries of ``summary.json`` (called on worker 0 only)."""
        return {}

    def bytes_sent(self) -> int:
        """The bytes this rank's exchanges have handed to MPI to send since the session started, as the owner of
        its exchanges counts them (:mod:`theanompi.comm.traffic`); 0 for a rule without exchanges."""
        return 0

    def bytes_sent_by_rank(self, per_worker: list[dict[str, Any]]) -> list[int]:
        """``summary.json``'s ``bytes_sent``: every session rank's, in rank order (called on worker 0 with the
        gathered worker records); rules with server ranks add theirs."""
        return [int(record["bytes_sent"]) for record in per_worker]

    def worker_record(self) -> dict[str, Any]:
        """This worker's entry of ``summary.json``'s ``per_worker`` list; rules add their counters."""
        return {"iterations": self.iteration, "bytes_sent": self.bytes_sent(),
                **{f"{k}_s": round(v, 6) for k, v in self.recorder.totals.items()}}

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
        resumable = self.checkpoints_inside_epochs and callable(getattr(data, "units_consumed", None))
        every = self.options.checkpoint_every_iters if resumable else 0
        try:
            for count in range(n_steps):
                self.step(count)
                self.update_average()
                ACTIVITY.progress()
                self.recorder.end_iteration()
                self.iteration += 1
                if progress is not None:  # rank 0's samples stand for every worker's (each step takes a batch)
                    progress.advance(count + 1, int(self.recorder.train_sums()[2]) * self.comm.size)
                if every and self.iteration % every == 0 and count + 1 < n_steps:
                    self.sync_inside_epoch()
                    self.before_checkpoint(epoch)
                    self.save_checkpoint(epoch - 1, epoch_units=data.units_consumed(count + 1))
                    if self.restart_requested():
                        return False
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
            if self.stopped_for_restart:
                break  # at a checkpoint inside the epoch: the restarted session continues from it
            ACTIVITY.enter("the epoch's end")
            self.end_of_epoch(epoch)
            if callable(getattr(self.model, "sync_state", None)):
                self.model.sync_state(self.comm)
            sent = self.bytes_sent()
            with self.model_to_validate():
                metrics = epoch_metrics(self.model, self.recorder, self.comm, epoch, progress, self.averaged_model,
                                        bytes_sent=sent - self._bytes_sent_before_epoch)
            self._bytes_sent_before_epoch = sent
            self.recorder.end_epoch(epoch, metrics)
            if every and (epoch + 1) % every == 0:
                self.before_checkpoint(epoch)
                self.save_checkpoint(epoch)
                if epoch + 1 < self.n_epochs and self.restart_requested():
                    break
            if not completed:
                break
        self.end_session()

    def end_session(self) -> None:
        """The rule's :meth:`finish`, then every worker's record gathered to worker 0, which writes the
        final model and ``summary.json``; every worker closes its recorder and cleans its model up. A session
        that stopped at a checkpoint to restart (:meth:`restart_requested`) writes neither: rank 0 says where it
        stopped instead."""
        ACTIVITY.enter("finishing")
        self.finish()
        written = self._writer.wait() if self._writer is not None else None
        if self.stopped_for_restart:
            if self.comm.rank == 0:
                write_stopped(self.ctx.spec.run_dir, {"checkpoint": str(written), "iteration": self.iteration})
                log.info("stopped at the checkpoint %s, as the launcher asked", written)
            self.recorder.close()
            self.model.cleanup()
            return
        self.adopt_average()
        with ACTIVITY.waiting("gathering the workers' records"):
            per_worker = self.comm.gather(self.worker_record(), root=0)
        summary = None
        if self.comm.rank == 0:
            summary = {"rule": self.rule_name, "workers": self.comm.size, "iterations": self.iteration,
                       **self.summary(), "bytes_sent": self.bytes_sent_by_rank(per_worker), "per_worker": per_worker}
        end_session(self.model, self.recorder, self.ctx.spec.run_dir, summary, plots=self.options.plots)
