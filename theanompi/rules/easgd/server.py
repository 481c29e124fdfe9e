"""EASGD's server rank: holds the centre, answers the workers' exchanges in turn, hands out
their steps (:class:`~theanompi.rules.easgd.step_ledger.StepLedger`), validates once per global
epoch, writes checkpoints and saves the centre as the final model. The protocol is described
in :mod:`theanompi.rules.easgd`.

Example
-------
>>> EASGDServer(ctx).run()       # in the session's server rank   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time

import numpy as np

from theanompi.comm.exchange.cudampi import MPIStaging
from theanompi.comm.fault_tolerance import acknowledge_failures, is_process_failure
from theanompi.comm.fused_params import FusedParams
from theanompi.core.errors import ContractError
from theanompi.core.polling import poll_until
from theanompi.core.session_options import EASGDOptions
from theanompi.models.contract import SyncType
from theanompi.rules.easgd.protocol import (
    REPLY_FIELDS,
    REPORT_FIELDS,
    RULE_NAME,
    SERVER_MAX_SLEEP,
    TAG_DELTA,
    TAG_PARAMS,
    TAG_REPLY,
    TAG_REPORT,
    TAG_STATE,
    connect,
    take_start_point,
)
from theanompi.rules.easgd.step_ledger import StepLedger
from theanompi.runtime.epoch_progress import EpochProgress
from theanompi.runtime.model_build import build_model, n_epochs_for
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.records import Progress, end_session, epoch_metrics
from theanompi.session.checkpoint import load_checkpoint, nothing_to_train, save_checkpoint
from theanompi.session.recorder import Recorder
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")


class EASGDServer:
    """The centre: answers exchanges in arrival order, validates once per global epoch, saves the model.

    The constructor only stores ``ctx``; :meth:`run` sets up (:meth:`setup`), serves, finishes.

    Example
    -------
    >>> EASGDServer(ctx).run()       # in the session's server rank   # doctest: +SKIP
    """

    def __init__(self, ctx: RankContext):
        self.ctx = ctx
        self.options = ctx.options_as(EASGDOptions)
        self.tau = self.options.tau
        self.checkpoint_every = self.options.checkpoint_every
        self.is_set_up = False

    def setup(self) -> None:
        """Connect, build the validating model, take the common start (or a checkpoint's centre),
        learn the shard sizes and send every worker its first grant (collective with the workers)."""
        if self.is_set_up:
            return
        self.is_set_up = True
        connection = connect(self.ctx)
        self.validation_comm, self.exchange_comm = connection.role_comm, connection.exchange_comm
        self.server_rank, self.worker_ranks = connection.server_rank, connection.worker_ranks
        self.n_workers = len(self.worker_ranks)
        self.worker_of_rank = {rank: k for k, rank in enumerate(self.worker_ranks)}
        # a 1-worker view of the data: the whole validation set, no reduction needed
        build_start = time.perf_counter()
        self.model = build_model(self.ctx, worker_rank=0, n_workers=1, sync_type=SyncType.LOCAL)
        self.fused = FusedParams(self.model.params)
        if self.model.data.n_batch_val:
            # the first call of a compiled function is slow (~0.25 s): pay it now, not while workers wait
            self.model.val_iter(0, Recorder(None))
            if callable(getattr(self.model, "rewind_validation", None)):
                self.model.rewind_validation()  # a model that walks its batches itself starts over
        # one row per exchange served: no warm-up step of its own; the build and first validation call are compile
        self.recorder = Recorder(self.ctx.spec.run_dir, write=True, warmup_iterations=0)
        self.recorder.record_phase("compile", time.perf_counter() - build_start)
        self.recorder.open_board(self.ctx.spec)
        self.n_epochs = n_epochs_for(self.model, self.options)
        self.alpha = self.fused.dtype.type(self.options.alpha)

        resume = self.options.resume
        take_start_point(self.exchange_comm, self.fused, root=self.worker_ranks[0], resumed=bool(resume),
                         staging=MPIStaging(cuda_aware=False))
        self.centre = self.fused.read().copy()
        with ACTIVITY.waiting("the workers' shard sizes"):
            batches = self.exchange_comm.gather(None, root=self.server_rank)
        self.shard_batches = [int(batches[rank]) for rank in self.worker_ranks]
        self.global_epoch = sum(self.shard_batches)
        target = self.n_epochs * self.global_epoch
        done, self.epochs_done = self._restore(resume, target) if resume else (0, 0)
        self.ledger = StepLedger(self.n_workers, self.tau, target, done=done)
        first = self.ledger.first_grants()
        self.exchange_comm.scatter([first[self.worker_of_rank[r]] if r in self.worker_of_rank else None
                                    for r in range(self.exchange_comm.size)], root=self.server_rank)

        size = self.fused.size
        self.incoming = np.empty(size, dtype=self.fused.dtype)
        self.report = np.zeros(len(REPORT_FIELDS), dtype=np.float64)
        self.deltas = [np.empty(size, dtype=self.fused.dtype) for _ in self.worker_ranks]
        self.replies = [np.zeros(len(REPLY_FIELDS), dtype=np.int64) for _ in self.worker_ranks]
        self.pending: list[list] = [[] for _ in self.worker_ranks]
        self.exchanges = [0] * self.n_workers
        self.reported_wait = [(0.0, 0)] * self.n_workers  # (seconds, exchanges) each worker last reported
        self.progress = Progress(self.n_epochs, self.epochs_done)
        self.epoch_progress = EpochProgress.for_this_rank(self.n_epochs, self.options.progress_every)
        self.snapshots: list[dict | None] = [None] * self.n_workers  # each worker's last (params, state, steps)
        self.awaited: set[int] = set()  # workers whose snapshot the pending checkpoint still needs
        self.checkpoint_epoch: int | None = None

    def _restore(self, path: str, target: int) -> tuple[int, int]:
        """The centre from a checkpoint (the workers restore themselves); returns (steps done, epochs done)."""
        payload = load_checkpoint(path)
        centre = np.asarray(payload["centre"]).ravel()
        if centre.size != self.fused.size:
            raise ContractError(f"RESUME={path!r}: the checkpoint's centre has {centre.size} values, "
                                f"the model {self.fused.size}")
        self.centre[:] = centre
        done, epochs_done = min(int(payload["iteration"]), target), int(payload["epoch"]) + 1
        self.recorder.iteration = done
        log.info("resumed from %s after global epoch %d (%d steps done)", path, epochs_done, done)
        return done, epochs_done

    def run(self) -> None:
        """Set up, answer exchanges until every worker was told to stop, then end the session."""
        self.setup()
        log.info("EASGD: %d workers, alpha %g, tau %d; %d global epochs of %d steps (%s)",
                 self.n_workers, self.options.alpha, self.tau, self.n_epochs, self.global_epoch,
                 " + ".join(map(str, self.shard_batches)))
        if not self.ledger.active:  # a resumed checkpoint holds every step: every worker's first grant is 0
            log.info("%s", nothing_to_train(str(self.options.resume), self.epochs_done, self.n_epochs))
        self.serve()
        self.finish()

    # the exchange loop --------------------------------------------------------------------
    def serve(self) -> None:
        # not at the top: importing mpi4py starts MPI, and the launcher imports the rules
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

        rec, exchange_comm, ledger = self.recorder, self.exchange_comm, self.ledger
        ACTIVITY.enter("serving the workers")
        turn = [0]  # where the next round-robin probe starts

        def probe() -> bool:
            """Workers are asked in turn, starting after the last one served: an Iprobe on ANY_SOURCE let a
            worker on this host take every turn while workers on another host waited (measured: 141 vs 1)."""
            n = len(self.worker_ranks)
            for offset in range(n):
                k = (turn[0] + offset) % n
                if k not in ledger.lost and exchange_comm.Iprobe(source=self.worker_ranks[k], tag=TAG_REPORT):
                    turn[0] = k
                    return True
            return False

        self._begin_epoch_progress()
        while ledger.active:
            try:
                with rec.timer("wait"):
                    poll_until(probe, SERVER_MAX_SLEEP)
                source = self.worker_ranks[turn[0]]
                turn[0] = (turn[0] + 1) % len(self.worker_ranks)
                k = self.worker_of_rank[source]
                with rec.timer("comm"):
                    exchange_comm.Recv(self.report, source=source, tag=TAG_REPORT)
                    exchange_comm.Recv(self.incoming, source=source, tag=TAG_PARAMS)
                    MPI.Request.Waitall(self.pending[k])  # the previous reply's buffers are free again
            except MPI.Exception as err:
                self._lose_workers(err)
                continue
            with rec.timer("calc"):
                delta = self.deltas[k]
                np.subtract(self.incoming, self.centre, out=delta)
                delta *= self.alpha
                self.centre += delta
                grant = ledger.report(k, int(self.report[0]))
                send_state = grant == 0 or k in self.awaited  # a stopping worker always leaves its state
                self.replies[k][:] = (grant, send_state)
            with rec.timer("comm"):
                self.pending[k] = [exchange_comm.Isend(self.replies[k], dest=source, tag=TAG_REPLY),
                                   exchange_comm.Isend(delta, dest=source, tag=TAG_DELTA)]
            self._book_report(k)
            if send_state:
                self._receive_snapshot(k, source, delta)
            rec.end_iteration()
            if self.epoch_progress is not None:  # the workers' reported steps and samples of this global epoch
                self.epoch_progress.advance(min(ledger.reported - self.epochs_done * self.global_epoch,
                                                self.global_epoch), int(rec.train_sums()[2]))
            while ledger.reported >= (self.epochs_done + 1) * self.global_epoch:
                if self.epoch_progress is not None:
                    self.epoch_progress.end()
                self.end_global_epoch(self.epochs_done)
                self.epochs_done += 1
                self._begin_epoch_progress()
                ACTIVITY.enter("serving the workers")
        if self.epoch_progress is not None:
            self.epoch_progress.end()

    def _begin_epoch_progress(self) -> None:
        """The progress through the next global epoch begins (rank 0 prints it), if there is one."""
        if self.epoch_progress is not None and self.epochs_done < self.n_epochs:
            self.epoch_progress.begin(self.epochs_done, self.global_epoch)

    def _receive_snapshot(self, k: int, source: int, delta: np.ndarray) -> None:
        """Worker ``k``'s state (sent right after its reply); its params are this exchange's ``w - d``."""
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

        try:
            with self.recorder.timer("comm"):
                message = self.exchange_comm.recv(source=source, tag=TAG_STATE)
        except MPI.Exception as err:
            self._lose_workers(err)
            return
        self.snapshots[k] = {"params": self.incoming - delta, "state": message["state"], "steps": message["steps"]}
        self.awaited.discard(k)
        if self.checkpoint_epoch is not None and not self.awaited:
            self.write_checkpoint()

    def _lose_workers(self, err: BaseException) -> None:
        """A peer died: with ON_WORKER_LOSS=continue drop it and re-grant its steps; else re-raise."""
        if self.options.on_worker_loss != "continue" or not is_process_failure(err):
            raise err
        ledger = self.ledger
        for rank in acknowledge_failures(self.exchange_comm):
            k = self.worker_of_rank.get(rank)
            if k is None or k in ledger.lost:
                continue
            ledger.lose(k)  # the steps it was granted but never reported go to the others
            self.pending[k] = []
            log.warning("EASGD: worker %d (rank %d) was lost after %d steps; carrying on with %d workers",
                        k, rank, ledger.steps[k], self.n_workers - len(ledger.lost))
        self.awaited.difference_update(ledger.lost)
        if self.checkpoint_epoch is not None and not self.awaited:
            self.write_checkpoint()

    def _book_report(self, k: int) -> None:
        """Record worker ``k``'s report (its steps are already in the ledger): training sums, waits."""
        _, loss_sum, err_sum, n, wait_s, n_prev = self.report.tolist()
        self.exchanges[k] += 1
        self.reported_wait[k] = (wait_s, int(n_prev))
        if n > 0:
            self.recorder.record_train(loss_sum / n, err_sum / n, int(n))

    def end_global_epoch(self, epoch: int) -> None:
        """Validate the centre, log the progress line, write the epoch record."""
        rec = self.recorder
        with rec.timer("calc"):
            self.fused.write(self.centre)
            metrics = epoch_metrics(self.model, rec, self.validation_comm, epoch, self.progress)
        metrics.update(iterations=self.ledger.reported, exchanges=sum(self.exchanges))
        rec.end_epoch(epoch, metrics)
        if self.checkpoint_every and (epoch + 1) % self.checkpoint_every == 0:
            self.request_checkpoint(epoch)

    # checkpoints --------------------------------------------------------------------------
    def request_checkpoint(self, epoch: int) -> None:
        """Ask every working worker for a snapshot at its next exchange; write once all have answered."""
        self.checkpoint_epoch = epoch
        self.awaited = {k for k, grant in enumerate(self.ledger.granted) if grant > 0}
        if not self.awaited:  # everybody has stopped (and left a final snapshot)
            self.write_checkpoint()

    def write_checkpoint(self) -> None:
        """One hickle file: the centre and every worker's snapshot (a lost one's is the centre)."""
        empty = {"params": self.centre, "state": [], "steps": 0}
        lost = self.ledger.lost
        snaps = [s if s is not None and k not in lost else empty for k, s in enumerate(self.snapshots)]
        path = save_checkpoint(self.options.checkpoint_dir, {
            "rule": RULE_NAME, "epoch": self.checkpoint_epoch, "iteration": self.ledger.reported,
            "n_workers": self.n_workers, "seed": self.options.seed, "centre": self.centre.copy(),
            "worker_params": [[v.copy() for v in self.fused.layout.views(np.asarray(s["params"]))] for s in snaps],
            "worker_state": [list(s["state"]) for s in snaps],
            "worker_iterations": [int(s["steps"]) for s in snaps],
        })
        log.info("checkpoint: %s", path)
        self.checkpoint_epoch = None

    def mean_waits(self) -> list[float | None]:
        """Per worker: mean seconds per exchange (send, queue, reply) over the exchanges it had
        completed at its last report (the last exchange's own time is known only to the worker)."""
        return [round(s / n, 6) if n else None for s, n in self.reported_wait]

    # the end ------------------------------------------------------------------------------
    def finish(self) -> None:
        """Complete the last replies, check the step count, save the centre and the session's summary."""
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

        for requests in self.pending:
            try:
                MPI.Request.Waitall(requests)
            except MPI.Exception as err:
                self._lose_workers(err)
        ledger = self.ledger
        missing = ledger.check_final()
        if missing:
            log.warning("EASGD: %d of %d steps were not trained: every other worker had stopped when a worker "
                        "was lost", missing, ledger.target)
            if ledger.reported > self.epochs_done * self.global_epoch or not self.recorder.epochs:
                self.end_global_epoch(self.epochs_done)  # validate the centre the session ends with
                self.epochs_done += 1
        ACTIVITY.enter("finishing")
        self.fused.write(self.centre)
        waits = self.mean_waits()
        end_session(self.model, self.recorder, self.ctx.spec.run_dir, {
            "rule": RULE_NAME, "workers": self.n_workers, "iterations": ledger.reported,
            "global_epoch_iterations": self.global_epoch, "shard_batches": self.shard_batches,
            "alpha": self.options.alpha, "tau": self.tau, "exchanges": self.exchanges,
            "mean_wait_s": waits, "lost_workers": sorted(ledger.lost),
            "per_worker": [{"iterations": s, "exchanges": e, "mean_wait_s": w}
                           for s, e, w in zip(ledger.steps, self.exchanges, waits)],
        }, plots=self.options.plots)
