"""Rank-side pieces every rule's loop shares: model construction, agreement checks,
validation across ranks, progress lines and the final model.

Example (inside a rule's ``run_rank``)
-------
>>> model = build_model(ctx, worker_rank=0, n_workers=2, sync_type="cdd")   # doctest: +SKIP
>>> val = validate(model, recorder, comm)                                  # doctest: +SKIP
>>> sorted(val)                                                            # doctest: +SKIP
['val_accuracy', 'val_error', 'val_loss', 'val_samples']
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from theanompi import rank_context
from theanompi.contract import WorkerConfig, check_model_instance
from theanompi.errors import ContractError
from theanompi.model_loader import load_model_class
from theanompi.param_access import assign, current_value, host_copy
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
        rank=worker_rank, size=n_workers, seed=spec.options["seed"], device=ctx.device,
        sync_type=sync_type, options=dict(spec.options), model_options=dict(spec.model_options),
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
    return int(options.get("n_epochs") or getattr(model, "n_epochs", None) or DEFAULT_EPOCHS)


def check_agreement(comm, **facts: Any) -> None:
    """Raise ContractError on every rank if ranks disagree on any fact (before exchanging)."""
    with ACTIVITY.waiting("an agreement check"):
        gathered = comm.allgather(facts)
    for key in facts:
        values = [g[key] for g in gathered]
        if any(v != values[0] for v in values):
            listing = ", ".join(f"rank {r} has {v!r}" for r, v in enumerate(values))
            raise ContractError(f"workers disagree on {key}: {listing}")


def allreduce_sums(comm, values: list[float]) -> np.ndarray:
    """Element-wise sum of a short list of floats over ``comm``."""
    from mpi4py import MPI

    mine = np.asarray(values, dtype=np.float64)
    total = np.empty_like(mine)
    with ACTIVITY.waiting("a collective"):
        comm.Allreduce(mine, total, op=MPI.SUM)  # not in place: safe to repeat after a lost worker
    return total


def validate(model, recorder, comm) -> dict[str, float]:
    """Run every validation batch on this rank; metrics averaged over all ranks' samples."""
    ACTIVITY.enter("validation")
    for count in range(model.data.n_batch_val):
        model.val_iter(count, recorder)
        ACTIVITY.progress()
    loss_sum, err_sum, n, top5_sum, n_top5 = allreduce_sums(comm, recorder.val_sums() + recorder.val_top5_sums())
    if n == 0:
        return {"val_loss": float("nan"), "val_error": float("nan"), "val_accuracy": float("nan"), "val_samples": 0}
    metrics = {
        "val_loss": loss_sum / n,
        "val_error": err_sum / n,
        "val_accuracy": 1.0 - err_sum / n,
        "val_samples": int(n),
    }
    if n_top5:  # a Theano-MPI model reported top-5 errors
        metrics["val_error_top5"] = top5_sum / n_top5
    return metrics


def train_metrics(recorder, comm) -> dict[str, float]:
    """Epoch training loss/error averaged over all ranks' samples, and the sample count."""
    loss_sum, err_sum, n = allreduce_sums(comm, recorder.train_sums())
    return {"train_loss_all": loss_sum / max(n, 1), "train_error_all": err_sum / max(n, 1), "train_samples": int(n)}


def format_duration(seconds: float) -> str:
    """``H:MM:SS``, with days once it passes 24 hours.

    Example
    -------
    >>> format_duration(3725), format_duration(90061.4), format_duration(float("inf"))
    ('01:02:05', '1 d 01:01:01', 'unknown')
    """
    if not seconds >= 0 or seconds == float("inf"):
        return "unknown"
    days, rest = divmod(int(round(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days} d {clock}" if days else clock


class Progress:
    """Rank 0's one line per epoch: loss, accuracy, samples/s, ETA."""

    def __init__(self, n_epochs: int):
        self.n_epochs = n_epochs
        self.start = time.perf_counter()
        self.epoch_start = self.start

    def epoch_done(self, epoch: int, metrics: dict[str, Any]) -> dict[str, float]:
        now = time.perf_counter()
        epoch_s = now - self.epoch_start
        self.epoch_start = now
        elapsed = now - self.start
        eta = elapsed / (epoch + 1) * (self.n_epochs - epoch - 1)
        rate = metrics.get("train_samples", 0) / epoch_s if epoch_s > 0 else float("nan")
        log.info(
            "epoch %d/%d  train loss %.4f err %.2f%%  val loss %.4f acc %.2f%%  %.0f samples/s  ETA %s",
            epoch + 1, self.n_epochs, metrics["train_loss_all"], 100 * metrics["train_error_all"],
            metrics["val_loss"], 100 * metrics["val_accuracy"], rate, format_duration(eta),
        )
        return {"epoch_s": epoch_s, "samples_per_s": rate, "elapsed_s": elapsed}


def save_final_params(params, run_dir: Path) -> Path:
    """Rank 0 writes the final parameters (param order) to ``RUN_DIR/final_params.npz``."""
    arrays = {f"p{i:03d}": host_copy(p) for i, p in enumerate(params)}
    path = Path(run_dir) / "final_params.npz"
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
    return path


def load_final_params(run_dir: Path) -> list[np.ndarray]:
    """The arrays :func:`save_final_params` wrote (never unpickles)."""
    with np.load(Path(run_dir) / "final_params.npz", allow_pickle=False) as data:
        return [data[k] for k in sorted(data.files)]


class WorkerLoop:
    """The epoch/iteration skeleton every rule's worker runs; rules fill in the hooks.

    Subclasses set :attr:`sync_type` (what the model compiles) and override
    :meth:`step` (one iteration, exchanges included), :meth:`end_of_epoch`
    (e.g. a final average), :meth:`stop_requested` (e.g. a server said stop) and
    :meth:`finish` (e.g. drain messages, build the final model).

    ``comm`` is the communicator of the *workers* (rules with server ranks split
    them off); validation and progress are aggregated over it.

    Example
    -------
    >>> class LocalOnly(WorkerLoop):
    ...     sync_type = "local"
    >>> LocalOnly(ctx, ctx.comm).run()        # doctest: +SKIP
    """

    sync_type: str | None = "local"
    rule_name: str = ""
    #: where the fused buffer lives: "host" (NumPy) or "device" (where the params are: CuPy on a GPU)
    fused_where: str = "host"

    def __init__(self, ctx, comm):
        from theanompi.params import FusedParams

        self.ctx = ctx
        self.comm = comm
        self.options = ctx.spec.options
        build_start = time.perf_counter()
        self.model = build_model(ctx, comm.rank, comm.size, self.sync_type)
        self.fused = FusedParams(self.model.params, where=self.fused_where)
        self.recorder = self.make_recorder()
        self.recorder.record_phase("compile", time.perf_counter() - build_start)
        self.n_epochs = n_epochs_for(self.model, self.options)
        self.iteration = 0
        self.epoch = 0
        self.restored: dict | None = None  # the checkpoint resumed from (rules read their extras from it)
        self.restored_slot = 0  # whose entries of it are this worker's
        self.start_epoch = self.restore(self.options["resume"]) if self.options.get("resume") else 0

    def make_recorder(self):
        """This worker's Recorder (called once by the constructor): worker 0 writes the run's records."""
        from theanompi.recorder import Recorder

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
        from theanompi.checkpoint import load_checkpoint

        payload = load_checkpoint(path)
        n_saved = int(payload["n_workers"])
        slot = self.comm.rank if n_saved == self.comm.size else 0
        self.restored, self.restored_slot = payload, slot
        if n_saved != self.comm.size and self.comm.rank == 0:
            log.warning("checkpoint of %d workers resumed with %d: every worker starts from worker 0's state",
                        n_saved, self.comm.size)
        params, state = payload["worker_params"][slot], payload["worker_state"][slot]
        targets = [("params", list(self.model.params), params), ("state_vars", self.state_vars(), state)]
        for what, variables, values in targets:
            if what == "state_vars" and len(values) == 0:
                continue  # a worker lost before its snapshot (EASGD): fresh optimizer state
            if len(variables) != len(values):
                raise ContractError(f"RESUME={path!r}: the checkpoint has {len(values)} {what}, the model {len(variables)}")
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
        from theanompi.checkpoint import save_checkpoint

        mine = ([host_copy(p) for p in self.model.params], [host_copy(v) for v in self.state_vars()],
                self.rule_state())
        with ACTIVITY.waiting("gathering a checkpoint"):
            gathered = self.comm.gather(mine, root=0)
        if self.comm.rank == 0:
            ACTIVITY.enter("writing a checkpoint")
            path = save_checkpoint(self.options["checkpoint_dir"], {
                "rule": self.rule_name, "epoch": epoch, "iteration": self.iteration, "n_workers": self.comm.size,
                "seed": self.options.get("seed", 0),
                "worker_params": [g[0] for g in gathered], "worker_state": [g[1] for g in gathered],
                "worker_rule_state": [g[2] for g in gathered],
            })
            log.info("checkpoint: %s", path)

    def check_finite(self, flat, what: str) -> None:
        """Raise NonFiniteError naming this rank and the parameter if ``flat`` holds NaN/Inf (CHECK_FINITE)."""
        if not self.options.get("check_finite", True):
            return
        bad = self.fused.non_finite(flat)
        if bad is not None:
            from theanompi.errors import NonFiniteError

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
        progress = Progress(self.n_epochs)
        rank0 = self.comm.rank == 0
        every = self.options.get("checkpoint_every") or 0
        for epoch in range(self.start_epoch, self.n_epochs):
            self.epoch = epoch
            completed = self.train_epoch(epoch)
            ACTIVITY.enter("the epoch's end")
            self.end_of_epoch(epoch)
            if callable(getattr(self.model, "sync_state", None)):
                self.model.sync_state(self.comm)
            metrics = train_metrics(self.recorder, self.comm)
            metrics.update(validate(self.model, self.recorder, self.comm))
            ACTIVITY.enter("the epoch's records")
            if rank0:
                metrics.update(progress.epoch_done(epoch, metrics))
            self.recorder.end_epoch(epoch, metrics)
            if every and (epoch + 1) % every == 0:
                self.before_checkpoint(epoch)
                self.save_checkpoint(epoch)
            if not completed:
                break
        ACTIVITY.enter("finishing")
        self.finish()
        with ACTIVITY.waiting("gathering the workers' records"):
            per_worker = self.comm.gather(self.worker_record(), root=0)
        if rank0:
            ACTIVITY.enter("writing the final model")
            last = self.recorder.epochs[-1]
            path = save_final_params(self.model.params, self.ctx.spec.run_dir)
            self.recorder.write_summary({
                "rule": self.rule_name, "workers": self.comm.size, "epochs": len(self.recorder.epochs),
                "iterations": self.iteration, "final_val_accuracy": last["val_accuracy"],
                "final_val_loss": last["val_loss"], "final_params": str(path), "wall_s": last.get("elapsed_s"),
                **self.summary(), "per_worker": per_worker,
            })
            log.info("final validation accuracy: %.2f%%", 100 * last["val_accuracy"])
        self.recorder.close()
        self.model.cleanup()
