"""EASGD's server rank: holds the centre, answers the workers' exchanges in turn, hands out
their steps (:class:`~theanompi.rules.easgd.step_ledger.StepLedger`), validates once per global
epoch, writes checkpoints (:class:`~theanompi.rules.easgd.snapshots.SnapshotBook`) and saves the
centre as the final model. The protocol is described in :mod:`theanompi.rules.easgd`.

:meth:`EASGDServer.create` builds everything the server works on -- its communicators, the validating model and
its records, the start agreed with the workers (the centre, their shard sizes, the ledger of steps), the message
buffers -- and the constructor only stores it; :meth:`EASGDServer.run` hands out the first grants, serves, finishes.

Example
-------
>>> EASGDServer.create(ctx).run()       # in the session's server rank   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from theanompi.comm.exchange.cudampi import MPIStaging
from theanompi.comm.fault_tolerance import acknowledge_failures, is_process_failure
from theanompi.comm.fused_params import FusedParams
from theanompi.comm.params_ema import ParamsEMA
from theanompi.comm.traffic import SentBytes
from theanompi.core.errors import ContractError
from theanompi.core.polling import Backoff
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
    Connection,
    connect,
    take_start_point,
)
from theanompi.rules.easgd.snapshots import Snapshot, SnapshotBook
from theanompi.rules.easgd.step_ledger import StepLedger
from theanompi.runtime.epoch_progress import EpochProgress
from theanompi.runtime.model_build import BuiltWorker, build_model, n_epochs_for
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.records import Progress, end_session, epoch_metrics
from theanompi.session.checkpoint import load_checkpoint, nothing_to_train
from theanompi.session.checkpoint_writer import CheckpointWriter
from theanompi.session.rank_status import stop_requested, write_stopped
from theanompi.session.recorder import Recorder
from theanompi.session.run_dir import owning_root
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")


def elastic_step(centre: np.ndarray, incoming: np.ndarray, alpha: np.floating[Any], out: np.ndarray) -> np.ndarray:
    """EASGD's update of the centre ``c`` by a worker's parameters ``w`` (``incoming``): ``d = alpha * (w - c)``
    into ``out``, then ``c <- c + d``; returns ``d``, what the worker subtracts from its own parameters.

    Example
    -------
    >>> c, w = np.array([0.0, 2.0], "float32"), np.array([4.0, 0.0], "float32")
    >>> elastic_step(c, w, np.float32(0.5), out=np.empty(2, "float32")).tolist(), c.tolist()
    ([2.0, -1.0], [2.0, 1.0])
    """
    np.subtract(incoming, centre, out=out)
    out *= alpha
    centre += out
    return out


class RoundRobin:
    """Which worker the server answers next: the workers are asked in turn, starting after the last one answered
    (an ``Iprobe`` on ``ANY_SOURCE`` let a worker on the server's host take every turn while workers on another
    host waited: measured 141 exchanges to 1).

    Example
    -------
    >>> turns, waiting = RoundRobin(n_workers=3), {0, 2}
    >>> [turns.take(waiting.__contains__) for _ in range(3)], turns.take(lambda k: False)
    ([0, 2, 0], None)
    """

    def __init__(self, n_workers: int):
        self.n_workers = n_workers
        self.next = 0  # the worker asked first at the next turn

    def take(self, has_report: Callable[[int], bool]) -> int | None:
        """The first worker from :attr:`next` on that ``has_report`` (it is asked last at the next turn), or None."""
        for offset in range(self.n_workers):
            k = (self.next + offset) % self.n_workers
            if has_report(k):
                self.next = (k + 1) % self.n_workers
                return k
        return None


@dataclass(frozen=True)
class ExchangeBuffers:
    """The server's message buffers: a worker's report and parameters land in ``report`` and ``incoming``; worker
    ``k``'s reply is sent from ``replies[k]`` and ``deltas[k]``, reused once those sends (``pending[k]``) completed."""

    incoming: np.ndarray
    report: np.ndarray
    deltas: list[np.ndarray]
    replies: list[np.ndarray]
    pending: list[list[Any]]

    @classmethod
    def allocate(cls, n_workers: int, size: int, dtype: np.dtype[Any]) -> ExchangeBuffers:
        """Buffers for ``n_workers`` workers exchanging ``size`` parameters of ``dtype``.

        Example
        -------
        >>> buffers = ExchangeBuffers.allocate(2, 5, np.dtype("float32"))
        >>> buffers.incoming.shape, len(buffers.deltas), buffers.replies[1].tolist(), buffers.report.size
        ((5,), 2, [0, 0], 7)
        """
        return cls(incoming=np.empty(size, dtype=dtype), report=np.zeros(len(REPORT_FIELDS), dtype=np.float64),
                   deltas=[np.empty(size, dtype=dtype) for _ in range(n_workers)],
                   replies=[np.zeros(len(REPLY_FIELDS), dtype=np.int64) for _ in range(n_workers)],
                   pending=[[] for _ in range(n_workers)])


class ExchangeTallies:
    """Per worker: the exchanges answered, its waiting as it last reported it (seconds, completed exchanges), and the
    bytes its exchanges sent as it last reported them (:mod:`theanompi.comm.traffic`).

    Example
    -------
    >>> tallies = ExchangeTallies(n_workers=2)
    >>> tallies.book(1, wait_s=0.0, completed=0, bytes_sent=100)
    >>> tallies.book(1, wait_s=0.5, completed=1, bytes_sent=200)
    >>> tallies.exchanges, tallies.mean_waits(), tallies.bytes_sent
    ([0, 2], [None, 0.5], [0, 200])
    """

    def __init__(self, n_workers: int):
        self.exchanges = [0] * n_workers
        self.reported_wait = [(0.0, 0)] * n_workers
        self.bytes_sent = [0] * n_workers

    def book(self, k: int, wait_s: float, completed: int, bytes_sent: int) -> None:
        """Worker ``k`` was answered; its report said ``wait_s`` seconds over its ``completed`` exchanges before, and
        ``bytes_sent`` bytes sent so far."""
        self.exchanges[k] += 1
        self.reported_wait[k] = (wait_s, completed)
        self.sent_so_far(k, bytes_sent)

    def sent_so_far(self, k: int, bytes_sent: int) -> None:
        """Worker ``k`` said it has sent ``bytes_sent`` bytes (a report, or a state snapshot after it)."""
        self.bytes_sent[k] = max(self.bytes_sent[k], int(bytes_sent))

    def mean_waits(self) -> list[float | None]:
        """Per worker: mean seconds per exchange (send, queue, reply) over the exchanges it had completed at its
        last report (the last exchange's own time is known only to the worker)."""
        return [round(s / n, 6) if n else None for s, n in self.reported_wait]


@dataclass(frozen=True)
class ServerStart:
    """What the server starts from, agreed with the workers: the centre (worker 0's initial parameters, or a
    checkpoint's centre), each worker's batches per shard epoch, the ledger of the session's steps, and the global
    epochs a resumed checkpoint holds already."""

    centre: np.ndarray
    shard_batches: list[int]
    ledger: StepLedger
    epochs_done: int
    #: the moving rate: EASGD_ALPHA, or after a resume at another number of workers the one that keeps the
    #: checkpoint's beta = workers * alpha (:func:`rescaled_alpha`)
    alpha: float
    #: AVERAGE_WEIGHTS=ema: the centre's moving average (None when off)
    average: ParamsEMA | None = None


def build_validator(ctx: RankContext) -> BuiltWorker:
    """The server's model, built as worker 0 of a 1-worker session (its data view is then the whole validation set,
    validated without a reduction), its fused parameters and the server's records (one row per exchange answered,
    no warm-up row: building the model and its first validation call are the compile phase)."""
    build_start = time.perf_counter()
    model = build_model(ctx, worker_rank=0, n_workers=1, sync_type=SyncType.LOCAL)
    fused = FusedParams(model.params)
    if model.data.n_batch_val:
        # the first call of a compiled function is slow (~0.25 s): pay it now, not while workers wait
        model.val_iter(0, Recorder(None))
        if callable(getattr(model, "rewind_validation", None)):
            model.rewind_validation()  # a model that walks its batches itself starts over
    recorder = Recorder(ctx.spec.run_dir, write=True, warmup_iterations=0)
    recorder.record_phase("compile", time.perf_counter() - build_start)
    return BuiltWorker(model=model, fused=fused, recorder=recorder, n_epochs=n_epochs_for(model, ctx.options))


def take_start(connection: Connection, built: BuiltWorker, options: EASGDOptions) -> ServerStart:
    """The server's half of the workers' start (:meth:`~theanompi.rules.easgd.worker.EASGDWorker.start_rule`,
    collective): the parameter layout checked, worker 0's parameters taken (unless the session resumes), the
    workers' shard sizes gathered; then a resumed checkpoint's centre and steps."""
    comm, fused = connection.exchange_comm, built.fused
    take_start_point(comm, fused, root=connection.worker_ranks[0], resumed=bool(options.resume),
                     staging=MPIStaging(cuda_aware=False), sent=SentBytes())  # worker 0 roots it: nothing to count
    centre = fused.read().copy()
    with ACTIVITY.waiting("the workers' shard sizes"):
        batches = comm.gather(None, root=connection.server_rank)
    shard_batches = [int(batches[rank]) for rank in connection.worker_ranks]
    target = built.n_epochs * sum(shard_batches)
    done, epochs_done, alpha = 0, 0, options.alpha
    if options.resume:
        done, epochs_done, alpha = restore_centre(options.resume, centre, target, options.alpha, len(shard_batches))
        built.recorder.iteration = done
    ledger = StepLedger(len(shard_batches), options.tau, target, done=done)
    return ServerStart(centre=centre, shard_batches=shard_batches, ledger=ledger, epochs_done=epochs_done,
                       alpha=alpha, average=start_average(options, centre))


def start_average(options: EASGDOptions, centre: np.ndarray) -> ParamsEMA | None:
    """AVERAGE_WEIGHTS=ema: the centre's moving average, starting at the centre (or a resumed checkpoint's
    average); None when off."""
    if options.average_weights != "ema":
        return None
    average = ParamsEMA(options.ema_decay, options.ema_start_epoch)
    payload = load_checkpoint(options.resume) if options.resume else {}
    saved = payload.get("average")
    if saved is not None and np.size(saved) != centre.size:
        raise ContractError(f"RESUME={options.resume!r}: the checkpoint's average has {np.size(saved)} values, "
                            f"the model {centre.size}")
    average.load(np.ravel(saved) if saved is not None else centre, int(payload.get("average_seen", 0)))
    return average


def rescaled_alpha(payload: dict[str, Any], alpha: float, n_workers: int) -> float:
    """The moving rate of a session resuming ``payload`` with ``n_workers``: ``alpha`` (EASGD_ALPHA) at the
    checkpoint's number of workers, else the one that keeps its ``beta = workers * alpha`` (Zhang et al.'s
    beta = p * alpha), at most 1.

    Example
    -------
    >>> rescaled_alpha({"n_workers": 3, "beta": 1.5}, 0.5, 2), rescaled_alpha({"n_workers": 2}, 0.75, 3)
    (0.75, 0.5)
    >>> rescaled_alpha({"n_workers": 2, "beta": 1.5}, 0.5, 2)
    0.5
    """
    saved = int(payload["n_workers"])
    if saved == n_workers:
        return alpha
    beta = float(payload.get("beta", alpha * saved))
    return min(1.0, beta / n_workers)


def restore_centre(path: str, centre: np.ndarray, target: int, alpha: float,
                   n_workers: int) -> tuple[int, int, float]:
    """A checkpoint's centre into ``centre`` (the workers restore themselves); returns (steps done, epochs done,
    the moving rate, :func:`rescaled_alpha`)."""
    payload = load_checkpoint(path)
    saved = np.asarray(payload["centre"]).ravel()
    if saved.size != centre.size:
        raise ContractError(f"RESUME={path!r}: the checkpoint's centre has {saved.size} values, "
                            f"the model {centre.size}")
    centre[:] = saved
    done, epochs_done = min(int(payload["iteration"]), target), int(payload["epoch"]) + 1
    log.info("resumed from %s after global epoch %d (%d steps done)", path, epochs_done, done)
    new_alpha = rescaled_alpha(payload, alpha, n_workers)
    if new_alpha != alpha:
        log.info("EASGD: %d workers continue a checkpoint of %d: alpha %g keeps beta = workers x alpha = %g%s",
                 n_workers, int(payload["n_workers"]), new_alpha, new_alpha * n_workers,
                 " (capped at 1)" if new_alpha == 1.0 else "")
    return done, epochs_done, new_alpha


class EASGDServer:
    """The centre: answers exchanges in turn, validates once per global epoch, saves the model.

    Constructed with everything it works on, built by :meth:`create`; the constructor only stores it and starts
    the bookkeeping of the exchanges to come. ``mpi`` is mpi4py's ``MPI`` module (passed in: importing it starts
    MPI, and the launcher imports the rules).

    Example
    -------
    >>> EASGDServer.create(ctx).run()       # in the session's server rank   # doctest: +SKIP
    """

    def __init__(self, ctx: RankContext, options: EASGDOptions, connection: Connection, built: BuiltWorker,
                 start: ServerStart, buffers: ExchangeBuffers, mpi: Any):
        self.ctx = ctx
        self.options = options
        self.mpi = mpi
        # the communicators: the server's own (it validates alone) and the exchanges' (the whole session)
        self.validation_comm = connection.role_comm
        self.exchange_comm = connection.exchange_comm
        self.server_rank = connection.server_rank
        self.worker_ranks = connection.worker_ranks
        self.n_workers = len(connection.worker_ranks)
        self.worker_of_rank = {rank: k for k, rank in enumerate(connection.worker_ranks)}
        # the validating model, its fused parameters (the centre is written into them to validate), the records
        self.model = built.model
        self.fused = built.fused
        self.recorder = built.recorder
        self.n_epochs = built.n_epochs
        # the elastic average and the steps
        self.moving_rate = start.alpha  # alpha as given (or rescaled): what the records say
        self.alpha = built.fused.dtype.type(start.alpha)  # in the parameters' dtype: what the centre moves by
        self.centre = start.centre
        self.average = start.average
        self.buffers = buffers
        self.ledger = start.ledger
        self.shard_batches = start.shard_batches
        self.global_epoch = sum(start.shard_batches)  # steps of one pass over the training set
        # what changes while serving
        self.epochs_done = start.epochs_done  # global epochs validated, a resumed checkpoint's included
        self.turns = RoundRobin(self.n_workers)
        self.tallies = ExchangeTallies(self.n_workers)
        self.traffic = SentBytes()  # the replies and deltas this server sent (theanompi.comm.traffic)
        self._workers_bytes_before_epoch = 0  # the workers' reported bytes when the global epoch began
        self.snapshots = SnapshotBook(self.n_workers)
        directory = str(options.checkpoint_dir)
        self.writer = CheckpointWriter(directory, root=owning_root(directory, ctx.spec.run_dir))
        every = options.checkpoint_every_iters
        self.next_checkpoint_steps = (self.ledger.reported // every + 1) * every if every else 0
        self.stopping = False  # the launcher asked to stop at a checkpoint, which was written
        self.progress = Progress(self.n_epochs, start.epochs_done)
        self.epoch_progress = EpochProgress.for_this_rank(self.n_epochs, options.progress_every)

    @classmethod
    def create(cls, ctx: RankContext, mpi: Any = None) -> EASGDServer:
        """Connect to the workers, build the validating model and the records, take the start with the workers (all
        of it collective with their own ``create`` and start), allocate the buffers and construct the server.
        ``mpi``: mpi4py's ``MPI`` module, imported here unless given."""
        if mpi is None:
            from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI; the launcher imports the rules

            mpi = MPI
        options = ctx.options_as(EASGDOptions)
        connection = connect(ctx)
        built = build_validator(ctx)
        start = take_start(connection, built, options)
        buffers = ExchangeBuffers.allocate(len(connection.worker_ranks), built.fused.size, built.fused.dtype)
        return cls(ctx, options, connection, built, start, buffers, mpi)

    def run(self) -> None:
        """Hand out the first grants, answer exchanges until every worker was told to stop, then end the session."""
        self.recorder.open_board(self.ctx.spec)
        self.hand_out_first_grants()
        log.info("EASGD: %d workers, alpha %g, tau %d; %d global epochs of %d steps (%s)",
                 self.n_workers, self.moving_rate, self.options.tau, self.n_epochs, self.global_epoch,
                 " + ".join(map(str, self.shard_batches)))
        if not self.ledger.active:  # a resumed checkpoint holds every step: every worker's first grant is 0
            log.info("%s", nothing_to_train(str(self.options.resume), self.epochs_done, self.n_epochs))
        self.serve()
        self.finish()

    def hand_out_first_grants(self) -> None:
        """Every worker's first block of steps (collective: the end of the workers' start; 0 means stop at once)."""
        first = self.ledger.first_grants()
        self.exchange_comm.scatter([first[self.worker_of_rank[r]] if r in self.worker_of_rank else None
                                    for r in range(self.exchange_comm.size)], root=self.server_rank)

    # the exchange loop --------------------------------------------------------------------
    def serve(self) -> None:
        """Answer exchanges until every worker was told to stop."""
        ACTIVITY.enter("serving the workers")
        self._begin_epoch_progress()
        while self.ledger.active:
            self.serve_one()
        if self.epoch_progress is not None:
            self.epoch_progress.end()

    def serve_one(self) -> None:
        """Answer the next worker in turn: receive its report and parameters ``w``, move the centre
        (:func:`elastic_step`), send ``d`` and its next grant (asking for its state when it stops or a checkpoint
        awaits it), book the report, and validate the centre if a global epoch ended."""
        mpi, comm, buffers, rec = self.mpi, self.exchange_comm, self.buffers, self.recorder
        try:
            with rec.timer("wait"):
                k = self._next_worker()
            source = self.worker_ranks[k]
            with rec.timer("comm"):
                comm.Recv(buffers.report, source=source, tag=TAG_REPORT)
                comm.Recv(buffers.incoming, source=source, tag=TAG_PARAMS)
                mpi.Request.Waitall(buffers.pending[k])  # the previous reply's buffers are free again
        except mpi.Exception as err:
            self._lose_workers(err)
            return
        with rec.timer("calc"):
            delta = elastic_step(self.centre, buffers.incoming, self.alpha, out=buffers.deltas[k])
            if self.average is not None:  # the centre moved after the worker's reported steps
                self.average.update(self.centre, int(buffers.report[0]), self.epochs_done)
            grant = self.ledger.report(k, int(buffers.report[0]))
            send_state = grant == 0 or self.snapshots.wants(k)  # a stopping worker always leaves its state
            buffers.replies[k][:] = (grant, send_state)
        with rec.timer("comm"):
            self.traffic.message(buffers.replies[k], delta)
            buffers.pending[k] = [comm.Isend(buffers.replies[k], dest=source, tag=TAG_REPLY),
                                  comm.Isend(delta, dest=source, tag=TAG_DELTA)]
        self._book_report(k)
        if send_state:
            self._receive_snapshot(k, delta)
        rec.end_iteration()
        self._count_global_epochs()
        self._checkpoint_inside_epoch_if_due()

    def _next_worker(self) -> int:
        """The next worker (in turn) whose report has arrived; polls with a growing pause until one has."""
        backoff = Backoff(SERVER_MAX_SLEEP)
        while (k := self.turns.take(self._has_report)) is None:
            backoff.wait()
        return k

    def _has_report(self, k: int) -> bool:
        """Whether worker ``k`` (not lost) has sent its report."""
        return k not in self.ledger.lost and bool(self.exchange_comm.Iprobe(source=self.worker_ranks[k],
                                                                             tag=TAG_REPORT))

    def _count_global_epochs(self) -> None:
        """The progress through this global epoch (the workers' reported steps and samples); validate the centre at
        every global epoch the reported steps completed."""
        if self.epoch_progress is not None:
            done_in_epoch = self.ledger.reported - self.epochs_done * self.global_epoch
            self.epoch_progress.advance(min(done_in_epoch, self.global_epoch), int(self.recorder.train_sums()[2]))
        while self.ledger.reported >= (self.epochs_done + 1) * self.global_epoch:
            if self.epoch_progress is not None:
                self.epoch_progress.end()
            self.end_global_epoch(self.epochs_done)
            self.epochs_done += 1
            self._begin_epoch_progress()
            ACTIVITY.enter("serving the workers")

    def _begin_epoch_progress(self) -> None:
        """The progress through the next global epoch begins (rank 0 prints it), if there is one."""
        if self.epoch_progress is not None and self.epochs_done < self.n_epochs:
            self.epoch_progress.begin(self.epochs_done, self.global_epoch)

    def _receive_snapshot(self, k: int, delta: np.ndarray) -> None:
        """Worker ``k``'s state (sent right after its reply); its params are this exchange's ``w - d``."""
        try:
            with self.recorder.timer("comm"):
                message = self.exchange_comm.recv(source=self.worker_ranks[k], tag=TAG_STATE)
        except self.mpi.Exception as err:
            self._lose_workers(err)
            return
        self.snapshots.keep(k, Snapshot(params=self.buffers.incoming - delta, state=message["state"],
                                        steps=message["steps"]))
        self.tallies.sent_so_far(k, message.get("bytes_sent", 0))
        self._write_checkpoint_if_due()

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
            self.buffers.pending[k] = []
            log.warning("EASGD: worker %d (rank %d) was lost after %d steps; carrying on with %d workers",
                        k, rank, ledger.steps[k], self.n_workers - len(ledger.lost))
        self.snapshots.forget(ledger.lost)
        self._write_checkpoint_if_due()

    def _book_report(self, k: int) -> None:
        """Record worker ``k``'s report (its steps are already in the ledger): training sums, waits."""
        _, loss_sum, err_sum, n, wait_s, completed, bytes_sent = self.buffers.report.tolist()
        self.tallies.book(k, wait_s, int(completed), int(bytes_sent))
        if n > 0:
            self.recorder.record_train(loss_sum / n, err_sum / n, int(n))

    def end_global_epoch(self, epoch: int) -> None:
        """Validate the centre, log the progress line, write the epoch record."""
        rec = self.recorder
        workers_sent = sum(self.tallies.bytes_sent)
        with rec.timer("calc"):
            self.fused.write(self.centre)
            metrics = epoch_metrics(self.model, rec, self.validation_comm, epoch, self.progress,
                                    self._average_in_model if self.average is not None else None,
                                    bytes_sent=workers_sent - self._workers_bytes_before_epoch)
        self._workers_bytes_before_epoch = workers_sent
        metrics.update(iterations=self.ledger.reported, exchanges=sum(self.tallies.exchanges))
        metrics.pop("lr", None)  # the validating model's, which never trains
        rec.end_epoch(epoch, metrics)
        if self.options.checkpoint_every and (epoch + 1) % self.options.checkpoint_every == 0:
            self.request_checkpoint(epoch)

    @contextmanager
    def _average_in_model(self) -> Iterator[None]:
        """The centre's average in the validating model inside the block (AVERAGE_WEIGHTS=ema), the centre after."""
        assert self.average is not None
        self.fused.write(self.average.values)
        try:
            yield
        finally:
            self.fused.write(self.centre)

    # checkpoints --------------------------------------------------------------------------
    def request_checkpoint(self, epoch: int, steps_into_epoch: int = 0) -> None:
        """Ask every working worker for a snapshot at its next exchange; write once all have answered (at once if
        every worker has stopped, leaving its final snapshot). ``epoch``: the global epochs completed - 1;
        ``steps_into_epoch``: the steps of the next one done (a checkpoint inside an epoch)."""
        if self.snapshots.epoch is not None or self.stopping:
            return  # one checkpoint at a time; none after the last one of a session stopping to restart
        self.snapshots.request(epoch, working=[k for k, grant in enumerate(self.ledger.granted) if grant > 0],
                               units=steps_into_epoch)
        self._write_checkpoint_if_due()

    def _checkpoint_inside_epoch_if_due(self) -> None:
        """CHECKPOINT_EVERY_ITERS: a checkpoint every so many steps the workers reported (inside global epochs)."""
        every = self.options.checkpoint_every_iters
        if not every or self.ledger.reported < self.next_checkpoint_steps:
            return
        self.next_checkpoint_steps = (self.ledger.reported // every + 1) * every
        into = self.ledger.reported - self.epochs_done * self.global_epoch
        if 0 < into and self.ledger.active:
            self.request_checkpoint(self.epochs_done - 1, steps_into_epoch=into)

    def _write_checkpoint_if_due(self) -> None:
        if self.snapshots.is_due():
            self.write_checkpoint()

    def write_checkpoint(self) -> None:
        """One hickle file, written in the background: the centre and every worker's snapshot (a lost one's is the
        centre), the moving rate and beta = workers x alpha (kept by a resume at another number of workers). When
        the launcher asked the session to stop at its next checkpoint, every worker is told to stop."""
        rows = self.snapshots.rows(self.ledger.lost, self.centre)
        self.writer.save({
            "rule": RULE_NAME, "epoch": self.snapshots.epoch, "epoch_units": self.snapshots.units,
            "iteration": self.ledger.reported, "n_workers": self.n_workers, "seed": self.options.seed,
            "worker_devices": [r["device"] for r in self.ctx.spec.ranks if r["role"] == "worker"],
            "centre": self.centre.copy(), "alpha": self.moving_rate, "beta": self.moving_rate * self.n_workers,
            "worker_params": [[v.copy() for v in self.fused.layout.views(np.asarray(s.params))] for s in rows],
            "worker_state": [list(s.state) for s in rows],
            "worker_iterations": [int(s.steps) for s in rows],
            **({"average": self.average.host_values(), "average_seen": self.average.seen}
               if self.average is not None else {}),
        })
        self.snapshots.written()
        if not self.stopping and self.ledger.active and stop_requested(self.ctx.spec.run_dir):
            self.stop_for_restart()

    def stop_for_restart(self) -> None:
        """The launcher asked the session to stop at this checkpoint (an elastic session grows): no more steps are
        granted, so every worker stops at its next exchange; the session ends without a final model."""
        self.stopping = True
        self.ledger.stop_granting()
        log.info("stopping at this checkpoint, as the launcher asked")

    # the end ------------------------------------------------------------------------------
    def bytes_sent_by_rank(self) -> list[int]:
        """``summary.json``'s ``bytes_sent``: the server's own and each worker's as last reported, by session rank."""
        by_rank = [0] * (1 + self.n_workers)
        by_rank[self.server_rank] = self.traffic.total
        for k, rank in enumerate(self.worker_ranks):
            by_rank[rank] = self.tallies.bytes_sent[k]
        return by_rank

    def finish(self) -> None:
        """Complete the last replies, check the step count, save the centre and the session's summary."""
        for requests in self.buffers.pending:
            try:
                self.mpi.Request.Waitall(requests)
            except self.mpi.Exception as err:
                self._lose_workers(err)
        ledger = self.ledger
        missing = ledger.check_final()
        written = self.writer.wait()
        if self.stopping:
            write_stopped(self.ctx.spec.run_dir, {"checkpoint": str(written), "iteration": ledger.reported})
            log.info("stopped at the checkpoint %s, as the launcher asked", written)
            self.recorder.close()
            self.model.cleanup()
            return
        if missing:
            log.warning("EASGD: %d of %d steps were not trained: every other worker had stopped when a worker "
                        "was lost", missing, ledger.target)
            if ledger.reported > self.epochs_done * self.global_epoch or not self.recorder.epochs:
                self.end_global_epoch(self.epochs_done)  # validate the centre the session ends with
                self.epochs_done += 1
        ACTIVITY.enter("finishing")
        self.fused.write(self.centre if self.average is None else self.average.values)  # the final model
        waits = self.tallies.mean_waits()
        end_session(self.model, self.recorder, self.ctx.spec.run_dir, {
            "rule": RULE_NAME, "workers": self.n_workers, "iterations": ledger.reported,
            "global_epoch_iterations": self.global_epoch, "shard_batches": self.shard_batches,
            "alpha": self.moving_rate, "tau": self.options.tau, "exchanges": self.tallies.exchanges,
            "mean_wait_s": waits, "lost_workers": sorted(ledger.lost), "bytes_sent": self.bytes_sent_by_rank(),
            "per_worker": [{"iterations": s, "exchanges": e, "mean_wait_s": w, "bytes_sent": b}
                           for s, e, w, b in zip(ledger.steps, self.tallies.exchanges, waits,
                                                 self.tallies.bytes_sent)],
        }, plots=self.options.plots)
