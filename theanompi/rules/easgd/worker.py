"""EASGD's worker ranks: local steps through the shared :class:`~theanompi.runtime.worker_loop.WorkerLoop`,
an exchange with the server whenever the granted steps are done (protocol:
:mod:`theanompi.rules.easgd`).

Example
-------
>>> EASGDWorker.create(ctx).run()       # in a worker rank   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from theanompi.comm.exchange.cudampi import MPIStaging
from theanompi.comm.param_access import host_copy
from theanompi.comm.traffic import SentBytes
from theanompi.core.polling import poll_until
from theanompi.core.session_options import EASGDOptions
from theanompi.models.contract import SyncType
from theanompi.rules.easgd.protocol import (
    REPLY_FIELDS,
    REPORT_FIELDS,
    RULE_NAME,
    TAG_DELTA,
    TAG_PARAMS,
    TAG_REPLY,
    TAG_REPORT,
    TAG_STATE,
    WORKER_MAX_SLEEP,
    Connection,
    connect,
    take_start_point,
)
from theanompi.runtime.model_build import BuiltWorker, build_worker
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.records import end_session, learning_rate_record
from theanompi.runtime.worker_loop import WorkerLoop
from theanompi.session.recorder import Recorder
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")


class EASGDWorker(WorkerLoop[EASGDOptions]):
    """One EASGD worker: local steps (the shared loop), an exchange whenever its grant is used up.

    Example
    -------
    >>> EASGDWorker.create(ctx).run()       # in a worker rank   # doctest: +SKIP
    """

    sync_type = SyncType.LOCAL
    rule_name = RULE_NAME
    checkpoints_inside_epochs = False  # the server writes every checkpoint
    fused_location = "device"

    def __init__(self, ctx: RankContext, built: BuiltWorker, options: EASGDOptions, connection: Connection,
                 staging: MPIStaging):
        super().__init__(ctx, connection.role_comm, built, options)
        self.exchange_comm = connection.exchange_comm
        self.server_rank = connection.server_rank
        self.worker_ranks = connection.worker_ranks
        self.staging = staging
        self.grant = 0
        self.stopped = False
        self.since = 0  # local steps since the last exchange
        self.exchanges = 0
        self.wait_s = 0.0
        self.max_wait_s = 0.0
        self._reported_train_sums = np.zeros(3)  # recorder train sums of this shard epoch already reported
        self._unreported_train_sums = np.zeros(3)  # train sums of finished shard epochs not yet reported
        self.traffic = SentBytes()  # the bytes of the start and the exchanges (theanompi.comm.traffic)
        self.report = np.zeros(len(REPORT_FIELDS), dtype=np.float64)
        self.reply = np.zeros(len(REPLY_FIELDS), dtype=np.int64)
        self.delta = self.fused.xp.empty(self.fused.size, dtype=self.fused.dtype)

    @classmethod
    def create(cls, ctx: RankContext) -> EASGDWorker:
        """Connect to the server and the other workers (collective), build the model, construct the worker.
        Every worker writes its own records, under ``RUN_DIR/workers/worker-K``."""
        connection = connect(ctx)
        comm = connection.role_comm
        recorder = Recorder(Path(ctx.spec.run_dir) / "workers" / f"worker-{comm.rank}", write=True,
                            root=ctx.spec.run_dir)
        built = build_worker(ctx, comm, cls.sync_type, cls.fused_location, recorder)
        return cls(ctx, built, ctx.options_as(EASGDOptions), connection, MPIStaging())

    @property
    def worker_index(self) -> int:
        """This worker's index among the workers (0 .. N-1)."""
        return self.comm.rank

    # the start ----------------------------------------------------------------------------------
    def start_rule(self) -> None:
        """Take the common start (or the checkpoint's), tell the server this shard's size, get the first grant."""
        take_start_point(self.exchange_comm, self.fused, root=self.worker_ranks[0],
                         resumed=self.restored is not None, staging=self.staging, sent=self.traffic)
        if self.restored is not None:  # a worker that joins starts its shard from the start
            slot = self.restored_worker
            self.iteration = self.recorder.iteration = (
                int(self.restored["worker_iterations"][slot]) if slot is not None else 0)
        with ACTIVITY.waiting("the server's first grant"):
            self.exchange_comm.gather(int(self.model.data.n_batch_train), root=self.server_rank)
            self.grant = int(self.exchange_comm.scatter(None, root=self.server_rank))
        self.stopped = self.grant == 0

    def resume_inside_epoch(self, epoch: int, units: int) -> None:
        """Nothing: an EASGD worker continues its own shard at its own step count (:meth:`start_rule`)."""

    def world_size_note(self) -> str:
        return ("the centre is kept, workers that continue keep their parameters and optimizer state, workers that "
                "join start from the centre with zero momentum")

    # hooks of the shared loop -----------------------------------------------------------
    def step(self, count: int) -> None:
        super().step(count)
        self.since += 1
        if self.since == self.grant:
            self.exchange()

    def stop_requested(self) -> bool:
        return self.stopped

    def bytes_sent(self) -> int:
        return self.traffic.total

    def update_average(self) -> None:
        """Nothing: the server keeps the centre's average (AVERAGE_WEIGHTS=ema)."""

    def summary(self) -> dict[str, Any]:
        return {
            "worker": self.worker_index, "iterations": self.iteration, "shard_epochs": len(self.recorder.epochs),
            "n_batch_train": self.model.data.n_batch_train, "exchanges": self.exchanges,
            "wait_s": round(self.wait_s, 6), "max_wait_s": round(self.max_wait_s, 6),
            "mean_wait_s": round(self.wait_s / self.exchanges, 6) if self.exchanges else None,
            "bytes_sent": self.traffic.total,
        }

    # the exchange -------------------------------------------------------------------------
    def _train_sums_to_report(self) -> np.ndarray:
        """Training (loss*n, error*n, n) since the last report, finished shard epochs included."""
        current = np.asarray(self.recorder.train_sums(), dtype=np.float64)
        train = self._unreported_train_sums + current - self._reported_train_sums
        self._reported_train_sums, self._unreported_train_sums = current, np.zeros(3)
        return train

    def exchange(self) -> None:
        """Send w and the report; receive d and the next grant; w <- w - d."""
        # not at the top: importing mpi4py starts MPI, and the launcher imports the rules
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

        exchange_comm, server = self.exchange_comm, self.server_rank
        start = time.perf_counter()
        with self.recorder.timer("comm"):
            flat = self.fused.read()
            self.check_finite(flat, "parameters sent to the centre")
            self.traffic.message(self.report, flat)  # counted before it leaves: the report carries the count
            self.report[:] = (self.since, *self._train_sums_to_report(), self.wait_s, self.exchanges,
                              self.traffic.total)
            into = self.staging.receivable(self.delta)
            requests = [exchange_comm.Irecv(self.reply, source=server, tag=TAG_REPLY),
                        exchange_comm.Irecv(into, source=server, tag=TAG_DELTA),
                        exchange_comm.Isend(self.report, dest=server, tag=TAG_REPORT),
                        exchange_comm.Isend(self.staging.sendable(flat), dest=server, tag=TAG_PARAMS)]
            poll_until(lambda: MPI.Request.Testall(requests), WORKER_MAX_SLEEP)
            self.staging.landed(into, self.delta)
            self.fused.xp.subtract(flat, self.delta, out=flat)
            self.fused.write(flat)
        seconds = time.perf_counter() - start
        self.wait_s += seconds
        self.max_wait_s = max(self.max_wait_s, seconds)
        self.exchanges += 1
        self.since = 0
        self.grant, send_state = (int(v) for v in self.reply)
        self.stopped = self.grant == 0
        if send_state:  # for a checkpoint: the state as of this exchange, and the steps done so far
            state = [host_copy(v) for v in self.state_vars()]
            self.traffic.message(state)
            exchange_comm.send({"state": state, "steps": self.iteration + 1, "bytes_sent": self.traffic.total},
                               dest=server, tag=TAG_STATE)

    # the session --------------------------------------------------------------------------
    def run(self) -> None:
        """Shard epochs until the server says stop; no validation here (the server validates the centre)."""
        self.start()
        shard_epoch = self.iteration // max(1, self.model.data.n_batch_train)  # > 0 after RESUME
        while not self.stopped:
            self.epoch = shard_epoch
            self.train_epoch(shard_epoch)
            # the recorder's sums restart with the epoch: keep what was not reported yet
            self._unreported_train_sums += np.asarray(self.recorder.train_sums()) - self._reported_train_sums
            self._reported_train_sums = np.zeros(3)
            self.recorder.end_epoch(shard_epoch, {"iterations": self.iteration, "exchanges": self.exchanges,
                                                  "bytes_sent": self.traffic.total - self._bytes_sent_before_epoch,
                                                  **learning_rate_record(self.model)})
            self._bytes_sent_before_epoch = self.traffic.total
            shard_epoch += 1
        ACTIVITY.enter("finishing")
        self.finish()
        log.debug("worker %d stopped after %d steps, %d exchanges", self.worker_index, self.iteration, self.exchanges)
        end_session(self.model, self.recorder, None, {"rule": self.rule_name, **self.summary()}, final_model=False,
                    plots=self.options.plots)
