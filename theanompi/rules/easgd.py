"""EASGD: Elastic Averaging SGD (Zhang, Choromanska & LeCun, 2015), asynchronous.

One **server** rank holds the centre variable ``c``; ``N`` **workers** train
locally (the model's one-function step, ``sync_type=None``). Every ``tau`` local
steps a worker exchanges with the server::

    worker -> server : w                    (its parameters, one fused buffer)
    server           : d = alpha * (w - c);  c <- c + d
    server -> worker : d
    worker           : w <- w - d

The server answers whichever worker asks first (point-to-point messages on a
communicator of their own, ``Iprobe(ANY_SOURCE)`` polled with a short adaptive
sleep so that an idle server, or a worker waiting for its reply, does not keep a
core busy). Parameters travel as contiguous buffers
(:class:`theanompi.params.FusedParams`), never pickled. A worker's buffers live
where its params are (GPU workers: CuPy arrays, handed to a CUDA-aware MPI as
they are, else staged through host memory by
:class:`theanompi.exchange.cudampi.MPIStaging`); the server is a CPU rank.

Ranks
    A session of ``N`` devices starts **N + 1 ranks**: the server is rank 0 of
    the session (first in the launch plan, so it is the rank that logs at INFO
    and prints the progress lines), a CPU rank on the host of the **first**
    device (``cpu0`` of that host); workers are ranks 1..N, one per device, in
    ``DEVICES`` order (worker ``k`` is session rank ``k + 1``).
Start
    Every rank, the server included, takes worker 0's initial parameters
    (broadcast), so the workers and the centre start from the same point.
Length
    A *global epoch* is one pass over the training set: the sum over workers of
    their ``n_batch_train``. The session trains exactly ``N_EPOCHS`` global
    epochs of local steps in total. To make that count exact although workers
    run at their own pace, the server hands out the steps: every reply grants the
    worker its next block, ``min(tau, steps not yet granted)`` local steps
    (the last block may be partial), and a grant of 0 means *stop*. Each exchange
    reports the steps done since the previous one (the grant), which the server
    sums. A stopped worker sends nothing more and leaves; the server leaves once
    every worker has been told to stop. Workers loop over their own shard's
    epochs (``model.adjust_hyperp(shard_epoch)`` at each shard-epoch start)
    until told to stop, so a worker with a shorter shard simply runs more shard
    epochs and nobody waits for anybody.
Validation
    The server builds the ModelClass too, as worker 0 of a 1-worker session
    (``config.rank=0, config.size=1``): its data view then holds the *whole*
    validation set, so it validates the centre by itself, without a reduction
    over workers that are busy training (its training view is never used). It
    validates once per global epoch, when the reported steps cross a multiple of
    the global epoch, and logs one line (train loss of the workers' steps,
    validation loss/accuracy of the centre, samples/s, ETA).
Results
    The centre is the session's final model: ``RUN_DIR/final_params.npz``.
    The server writes ``epochs.jsonl`` (per global epoch), ``iterations.jsonl``
    (one row per exchange served: ``calc`` = elastic update and validation,
    ``comm`` = receive/send, ``wait`` = idle polling) and ``summary.json``
    (rule, workers, iterations, final validation accuracy, and per worker: local
    steps, exchanges and mean wait per exchange). Each worker ``k`` writes its own
    records into ``RUN_DIR/workers/worker-k/`` (``iterations.jsonl`` per local
    step with the exchange's time in ``comm``, ``epochs.jsonl`` per shard
    epoch, ``summary.json`` with its exact exchange count and wait times).

Checkpoints
    With ``CHECKPOINT_EVERY=K`` the server asks, after every K-th global epoch, each
    active worker for its state: the reply of the worker's next exchange carries a
    flag, and the worker answers it at once with its optimizer state (``state_vars``)
    and its step count. Its parameters are known to the server (the ``w - d`` of
    that exchange), so each worker's snapshot is exact at its own exchange. A worker
    told to stop always sends its final state. Once every worker has answered, the
    server writes one checkpoint: the centre, every worker's parameters, state and
    step count, and the session's step count and global epoch. ``RESUME`` starts every
    worker from its own snapshot (at the start of the shard epoch it was in) and the
    server from the centre; the remaining steps are ``N_EPOCHS`` global epochs minus
    the steps already done.
Lost workers
    With ``ON_WORKER_LOSS=continue`` (mpiexec runs under ULFM) the server notices a
    dead worker (``MPI_ERR_PROC_FAILED``), drops it and hands the steps it had been
    granted but not reported to the others, so the session still trains its
    ``N_EPOCHS`` global epochs (unless every other worker had already stopped: then
    the missing steps are logged). ``summary.json`` lists ``lost_workers``. Losing
    the server ends the session.

Options: ``EASGD_ALPHA`` / ``alpha`` (moving rate, a number in (0, 1], default
0.5) and ``EASGD_TAU`` / ``tau`` (local steps between exchanges, integer >= 1,
default 4).

Example
-------
>>> from theanompi import EASGD
>>> rule = EASGD()
>>> rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
...           alpha=0.5, tau=4, n_epochs=10)      # doctest: +SKIP
>>> rule.wait()                                   # 3 ranks: server + 2 workers  # doctest: +SKIP
0
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from theanompi.devices import Device
from theanompi.exchange.cudampi import MPIStaging
from theanompi.mpirun import RankSpec
from theanompi.options import Option, fraction, positive_int
from theanompi.rules.base import Rule
from theanompi.training import WorkerLoop
from theanompi.watchdog import ACTIVITY

log = logging.getLogger("theanompi")

#: Message tags on the exchange communicator.
TAG_REPORT, TAG_PARAMS, TAG_REPLY, TAG_DELTA, TAG_STATE = 41, 42, 43, 44, 45
#: Reply (int64): the next grant of local steps (0: stop) and whether to send the state now.
REPLY_FIELDS = ("grant", "send_state")
#: Report header (float64): steps since the last exchange, training loss*n, error*n and n of those
#: steps, the worker's total exchange time so far and its number of completed exchanges.
REPORT_FIELDS = ("steps", "loss_sum", "error_sum", "samples", "wait_s", "exchanges")
#: Longest sleep between two polls (seconds): the server's and a waiting worker's.
SERVER_MAX_SLEEP = 1e-3
WORKER_MAX_SLEEP = 1e-3




class EASGD(Rule):
    """Asynchronous elastic averaging: one server (the centre) and N local-SGD workers.

    Example
    -------
    >>> from theanompi.devices import parse_devices
    >>> ranks = EASGD.launch_ranks(parse_devices("cpu0,cpu1"), {"alpha": 0.5, "tau": 4})
    >>> [(r.role, str(r.device)) for r in ranks]
    [('server', 'cpu0'), ('worker', 'cpu0'), ('worker', 'cpu1')]
    """

    name = "EASGD"
    supports_worker_loss = True
    rule_options = (
        Option("alpha", "EASGD_ALPHA", fraction, 0.5,
               "moving rate: each exchange moves worker and centre alpha*(w - c) towards each other"),
        Option("tau", "EASGD_TAU", positive_int, 4, "local steps between a worker's exchanges with the server"),
    )

    @classmethod
    def launch_ranks(cls, devices: list[Device], options: dict[str, Any]) -> list[RankSpec]:
        """The server first (session rank 0, a CPU rank on the first device's host), then one worker per device."""
        server = RankSpec(Device("cpu", 0, devices[0].host), "server")
        return [server] + [RankSpec(device, "worker") for device in devices]

    @classmethod
    def run_rank(cls, ctx) -> None:
        if ctx.role == "server":
            EASGDServer(ctx).run()
        else:
            EASGDWorker(ctx).run()


# ----- helpers shared by both sides ---------------------------------------------------------
def _connect(ctx):
    """(role communicator, exchange communicator, server rank, worker ranks); collective over the session."""
    role_comm = ctx.role_comm()
    xcomm = ctx.comm.Dup()  # the exchange's own message space
    return role_comm, xcomm, ctx.ranks_with_role("server")[0], ctx.ranks_with_role("worker")


def _start_point(xcomm, fused, root: int, resumed: bool, staging) -> None:
    """Every rank checks the parameter layout, then takes ``root``'s initial parameters
    (unless the session resumes a checkpoint: then every rank has its own already)."""
    from theanompi.training import check_agreement

    check_agreement(xcomm, n_params=fused.size, param_dtype=str(fused.dtype))
    if not resumed:
        flat = fused.read()
        buf = staging.sendable(flat)
        xcomm.Bcast(buf, root=root)
        fused.write(staging.landed(buf, flat))


def _poll(test, max_sleep: float) -> None:
    """Call ``test()`` until it returns True; sleep 0, 10 us, 20 us ... ``max_sleep`` between calls."""
    pause = 0.0
    while not test():
        if pause:
            time.sleep(pause)
        pause = min(max(2.0 * pause, 1e-5), max_sleep)


def grant_steps(tau: int, target: int, assigned: int) -> int:
    """The next block of local steps a worker may do: ``min(tau, target - assigned)`` (0 = stop).

    Example
    -------
    >>> [grant_steps(4, 10, a) for a in (0, 4, 8, 10)]
    [4, 4, 2, 0]
    """
    return max(0, min(tau, target - assigned))


# ----- the server ---------------------------------------------------------------------------
class EASGDServer:
    """The centre: answers exchanges in arrival order, validates once per global epoch, saves the model.

    Example
    -------
    >>> EASGDServer(ctx).run()       # in the session's server rank   # doctest: +SKIP
    """

    def __init__(self, ctx):
        from theanompi.params import FusedParams
        from theanompi.recorder import Recorder
        from theanompi.training import Progress, build_model, n_epochs_for

        self.ctx = ctx
        self.options = ctx.spec.options
        self.solo, self.xcomm, self.server, self.workers = _connect(ctx)
        self.n_workers = len(self.workers)
        self.index = {rank: k for k, rank in enumerate(self.workers)}
        # a 1-worker view of the data: the whole validation set, no reduction needed
        self.model = build_model(ctx, worker_rank=0, n_workers=1, sync_type=None)
        self.fused = FusedParams(self.model.params)
        if self.model.data.n_batch_val:
            # the first call of a compiled function is slow (~0.25 s): pay it now, not while workers wait
            self.model.val_iter(0, Recorder(None))
            if callable(getattr(self.model, "rewind_validation", None)):
                self.model.rewind_validation()  # a model that walks its batches itself starts over
        self.recorder = Recorder(ctx.spec.run_dir, write=True)
        self.n_epochs = n_epochs_for(self.model, self.options)
        self.alpha = self.fused.dtype.type(self.options["alpha"])
        self.tau = int(self.options["tau"])

        resume = self.options.get("resume")
        _start_point(self.xcomm, self.fused, root=self.workers[0], resumed=bool(resume),
                     staging=MPIStaging(cuda_aware=False))
        self.centre = self.fused.read().copy()
        with ACTIVITY.waiting("the workers' shard sizes"):
            batches = self.xcomm.gather(None, root=self.server)
        self.shard_batches = [int(batches[rank]) for rank in self.workers]
        self.global_epoch = sum(self.shard_batches)
        self.target = self.n_epochs * self.global_epoch
        self.iterations = 0
        self.epochs_done = 0
        if resume:
            self._restore(resume)
        self.assigned = self.iterations
        self.granted = []
        for _ in self.workers:
            grant = grant_steps(self.tau, self.target, self.assigned)
            self.assigned += grant
            self.granted.append(grant)
        self.xcomm.scatter([self.granted[self.index[r]] if r in self.index else None
                            for r in range(self.xcomm.size)], root=self.server)
        self.active = sum(1 for g in self.granted if g > 0)

        size = self.fused.size
        self.incoming = np.empty(size, dtype=self.fused.dtype)
        self.report = np.zeros(len(REPORT_FIELDS), dtype=np.float64)
        self.deltas = [np.empty(size, dtype=self.fused.dtype) for _ in self.workers]
        self.replies = [np.zeros(len(REPLY_FIELDS), dtype=np.int64) for _ in self.workers]
        self.pending: list[list] = [[] for _ in self.workers]
        self.exchanges = [0] * self.n_workers
        self.steps = [0] * self.n_workers  # local steps each worker reported
        self.reported_wait = [(0.0, 0)] * self.n_workers  # (seconds, exchanges) each worker last reported
        self.progress = Progress(self.n_epochs)
        self.checkpoint_every = int(self.options.get("checkpoint_every") or 0)
        self.snapshots: list[dict | None] = [None] * self.n_workers  # each worker's last (params, state, steps)
        self.awaited: set[int] = set()  # workers whose snapshot the pending checkpoint still needs
        self.checkpoint_epoch: int | None = None
        self.lost: list[int] = []  # workers lost on the way (ON_WORKER_LOSS=continue)

    def _restore(self, path: str) -> None:
        """Centre, step count and global epoch from a checkpoint (the workers restore themselves)."""
        from theanompi.checkpoint import load_checkpoint
        from theanompi.errors import ContractError

        payload = load_checkpoint(path)
        centre = np.asarray(payload["centre"]).ravel()
        if centre.size != self.fused.size:
            raise ContractError(f"RESUME={path!r}: the checkpoint's centre has {centre.size} values, "
                                f"the model {self.fused.size}")
        self.centre[:] = centre
        self.iterations = min(int(payload["iteration"]), self.target)
        self.epochs_done = int(payload["epoch"]) + 1
        self.recorder.iteration = self.iterations
        log.info("resumed from %s after global epoch %d (%d steps done)", path, self.epochs_done, self.iterations)

    def run(self) -> None:
        log.info("EASGD: %d workers, alpha %g, tau %d; %d global epochs of %d steps (%s)",
                 self.n_workers, self.options["alpha"], self.tau, self.n_epochs, self.global_epoch,
                 " + ".join(map(str, self.shard_batches)))
        self.serve()
        self.finish()

    # the exchange loop --------------------------------------------------------------------
    def serve(self) -> None:
        from mpi4py import MPI

        rec, xcomm = self.recorder, self.xcomm
        ACTIVITY.enter("serving the workers")
        turn = [0]  # where the next round-robin probe starts

        def probe() -> bool:
            """Workers are asked in turn, starting after the last one served: an Iprobe on ANY_SOURCE let a
            worker on this host take every turn while workers on another host waited (measured: 141 vs 1)."""
            n = len(self.workers)
            for offset in range(n):
                k = (turn[0] + offset) % n
                if k not in self.lost and xcomm.Iprobe(source=self.workers[k], tag=TAG_REPORT):
                    turn[0] = k
                    return True
            return False

        while self.active:
            try:
                with rec.timer("wait"):
                    _poll(probe, SERVER_MAX_SLEEP)
                source = self.workers[turn[0]]
                turn[0] = (turn[0] + 1) % len(self.workers)
                k = self.index[source]
                with rec.timer("comm"):
                    xcomm.Recv(self.report, source=source, tag=TAG_REPORT)
                    xcomm.Recv(self.incoming, source=source, tag=TAG_PARAMS)
                    MPI.Request.Waitall(self.pending[k])  # the previous reply's buffers are free again
            except MPI.Exception as err:
                self._lose_workers(err)
                continue
            with rec.timer("calc"):
                delta = self.deltas[k]
                np.subtract(self.incoming, self.centre, out=delta)
                delta *= self.alpha
                self.centre += delta
                grant = grant_steps(self.tau, self.target, self.assigned)
                self.assigned += grant
                send_state = grant == 0 or k in self.awaited  # a stopping worker always leaves its state
                self.replies[k][:] = (grant, send_state)
            with rec.timer("comm"):
                self.pending[k] = [xcomm.Isend(self.replies[k], dest=source, tag=TAG_REPLY),
                                   xcomm.Isend(delta, dest=source, tag=TAG_DELTA)]
            self._account(k, grant)
            if send_state:
                self._receive_snapshot(k, source, delta)
            rec.end_iteration()
            while self.iterations >= (self.epochs_done + 1) * self.global_epoch:
                self.end_global_epoch(self.epochs_done)
                self.epochs_done += 1
                ACTIVITY.enter("serving the workers")

    def _receive_snapshot(self, k: int, source: int, delta: np.ndarray) -> None:
        """Worker ``k``'s state (sent right after its reply); its params are this exchange's ``w - d``."""
        from mpi4py import MPI

        try:
            with self.recorder.timer("comm"):
                message = self.xcomm.recv(source=source, tag=TAG_STATE)
        except MPI.Exception as err:
            self._lose_workers(err)
            return
        self.snapshots[k] = {"params": self.incoming - delta, "state": message["state"], "steps": message["steps"]}
        self.awaited.discard(k)
        if self.checkpoint_epoch is not None and not self.awaited:
            self.write_checkpoint()

    def _lose_workers(self, err: BaseException) -> None:
        """A peer died: with ON_WORKER_LOSS=continue drop it and re-grant its steps; else re-raise."""
        from theanompi.fault_tolerance import acknowledge_failures, is_process_failure

        if self.options.get("on_worker_loss") != "continue" or not is_process_failure(err):
            raise err
        for rank in acknowledge_failures(self.xcomm):
            k = self.index.get(rank)
            if k is None or k in self.lost:
                continue
            self.lost.append(k)
            self.pending[k] = []
            if self.granted[k] > 0:
                self.active -= 1
                self.assigned -= self.granted[k]  # steps it was granted but never reported go to the others
                self.granted[k] = 0
            log.warning("EASGD: worker %d (rank %d) was lost after %d steps; carrying on with %d workers",
                        k, rank, self.steps[k], self.n_workers - len(self.lost))
        self.awaited.difference_update(self.lost)
        if self.checkpoint_epoch is not None and not self.awaited:
            self.write_checkpoint()

    def _account(self, k: int, grant: int) -> None:
        """Book worker ``k``'s report (already answered with ``grant``)."""
        steps, loss_sum, err_sum, n, wait_s, n_prev = self.report.tolist()
        if int(steps) != self.granted[k]:
            raise RuntimeError(f"EASGD protocol error: worker {k} reported {int(steps)} steps, "
                               f"granted {self.granted[k]}")
        self.granted[k] = grant
        self.iterations += int(steps)
        self.steps[k] += int(steps)
        self.exchanges[k] += 1
        self.reported_wait[k] = (wait_s, int(n_prev))
        if n > 0:
            self.recorder.record_train(loss_sum / n, err_sum / n, int(n))
        if grant == 0:
            self.active -= 1

    def end_global_epoch(self, epoch: int) -> None:
        """Validate the centre, log the progress line, write the epoch record."""
        from theanompi.training import validate

        rec = self.recorder
        loss_sum, err_sum, n = rec.train_sums()
        with rec.timer("calc"):
            self.fused.write(self.centre)
            metrics: dict[str, Any] = {
                "train_loss_all": loss_sum / max(n, 1), "train_error_all": err_sum / max(n, 1),
                "train_samples": int(n),
            }
            metrics.update(validate(self.model, rec, self.solo))
        metrics.update(self.progress.epoch_done(epoch, metrics))
        metrics.update(iterations=self.iterations, exchanges=sum(self.exchanges))
        rec.end_epoch(epoch, metrics)
        if self.checkpoint_every and (epoch + 1) % self.checkpoint_every == 0:
            self.request_checkpoint(epoch)

    # checkpoints --------------------------------------------------------------------------
    def request_checkpoint(self, epoch: int) -> None:
        """Ask every working worker for a snapshot at its next exchange; write once all have answered."""
        self.checkpoint_epoch = epoch
        self.awaited = {k for k in range(self.n_workers) if self.granted[k] > 0 and k not in self.lost}
        if not self.awaited:  # everybody has stopped (and left a final snapshot)
            self.write_checkpoint()

    def write_checkpoint(self) -> None:
        """One hickle file: the centre and every worker's snapshot (a lost one's is the centre)."""
        from theanompi.checkpoint import save_checkpoint

        empty = {"params": self.centre, "state": [], "steps": 0}
        snaps = [s if s is not None and k not in self.lost else empty for k, s in enumerate(self.snapshots)]
        path = save_checkpoint(self.options["checkpoint_dir"], {
            "rule": EASGD.name, "epoch": self.checkpoint_epoch, "iteration": self.iterations,
            "n_workers": self.n_workers, "seed": self.options.get("seed", 0), "centre": self.centre.copy(),
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

    def finish(self) -> None:
        from mpi4py import MPI

        from theanompi.training import save_final_params

        for requests in self.pending:
            try:
                MPI.Request.Waitall(requests)
            except MPI.Exception as err:
                self._lose_workers(err)
        if self.iterations != self.assigned:
            raise RuntimeError(f"EASGD: {self.iterations} steps reported, {self.assigned} granted")
        if self.iterations < self.target:
            if not self.lost:
                raise RuntimeError(f"EASGD: {self.iterations} steps reported, {self.target} expected")
            log.warning("EASGD: %d of %d steps were not trained: every other worker had stopped when a worker "
                        "was lost", self.target - self.iterations, self.target)
            if self.iterations > self.epochs_done * self.global_epoch or not self.recorder.epochs:
                self.end_global_epoch(self.epochs_done)  # validate the centre the session ends with
                self.epochs_done += 1
        self.fused.write(self.centre)
        path = save_final_params(self.model.params, self.ctx.spec.run_dir)
        last = self.recorder.epochs[-1]
        waits = self.mean_waits()
        self.recorder.write_summary({
            "rule": EASGD.name, "workers": self.n_workers, "epochs": len(self.recorder.epochs),
            "iterations": self.iterations, "global_epoch_iterations": self.global_epoch,
            "shard_batches": self.shard_batches, "final_val_accuracy": last["val_accuracy"],
            "final_val_loss": last["val_loss"], "final_params": str(path), "wall_s": last.get("elapsed_s"),
            "alpha": self.options["alpha"], "tau": self.tau, "exchanges": self.exchanges,
            "mean_wait_s": waits, "lost_workers": sorted(self.lost),
            "per_worker": [{"iterations": s, "exchanges": e, "mean_wait_s": w}
                           for s, e, w in zip(self.steps, self.exchanges, waits)],
        })
        log.info("final validation accuracy: %.2f%%", 100 * last["val_accuracy"])
        self.recorder.close()
        self.model.cleanup()


# ----- a worker -----------------------------------------------------------------------------
class EASGDWorker(WorkerLoop):
    """One EASGD worker: local steps (the shared loop), an exchange whenever its grant is used up.

    Example
    -------
    >>> EASGDWorker(ctx).run()       # in a worker rank   # doctest: +SKIP
    """

    sync_type = None
    rule_name = "EASGD"
    fused_where = "device"

    def __init__(self, ctx):
        role_comm, self.xcomm, self.server, workers = _connect(ctx)
        super().__init__(ctx, role_comm)
        self.index = role_comm.rank
        self.staging = MPIStaging()
        _start_point(self.xcomm, self.fused, root=workers[0], resumed=self.restored is not None, staging=self.staging)
        if self.restored is not None:
            self.iteration = self.recorder.iteration = int(self.restored["worker_iterations"][self.restored_slot])
        with ACTIVITY.waiting("the server's first grant"):
            self.xcomm.gather(int(self.model.data.n_batch_train), root=self.server)
            self.grant = int(self.xcomm.scatter(None, root=self.server))
        self.stopped = self.grant == 0
        self.since = 0  # local steps since the last exchange
        self.exchanges = 0
        self.wait_s = 0.0
        self.max_wait_s = 0.0
        self.report = np.zeros(len(REPORT_FIELDS), dtype=np.float64)
        self.reply = np.zeros(len(REPLY_FIELDS), dtype=np.int64)
        self.delta = self.fused.xp.empty(self.fused.size, dtype=self.fused.dtype)
        self._train_base = np.zeros(3)  # recorder train sums of this shard epoch already reported
        self._train_carry = np.zeros(3)  # unreported sums of finished shard epochs

    # hooks of the shared loop -----------------------------------------------------------
    def make_recorder(self):
        """Every worker writes its own records, under ``RUN_DIR/workers/worker-K``."""
        from theanompi.recorder import Recorder

        return Recorder(Path(self.ctx.spec.run_dir) / "workers" / f"worker-{self.comm.rank}", write=True)

    def step(self, count: int) -> None:
        super().step(count)
        self.since += 1
        if self.since == self.grant:
            self.exchange()

    def stop_requested(self) -> bool:
        return self.stopped

    def summary(self) -> dict[str, Any]:
        return {
            "worker": self.index, "iterations": self.iteration, "shard_epochs": len(self.recorder.epochs),
            "n_batch_train": self.model.data.n_batch_train, "exchanges": self.exchanges,
            "wait_s": round(self.wait_s, 6), "max_wait_s": round(self.max_wait_s, 6),
            "mean_wait_s": round(self.wait_s / self.exchanges, 6) if self.exchanges else None,
        }

    # the exchange -------------------------------------------------------------------------
    def exchange(self) -> None:
        """Send w and the report; receive d and the next grant; w <- w - d."""
        from mpi4py import MPI

        xcomm, server = self.xcomm, self.server
        current = np.asarray(self.recorder.train_sums(), dtype=np.float64)
        train = self._train_carry + current - self._train_base
        self._train_base, self._train_carry = current, np.zeros(3)
        self.report[:] = (self.since, *train, self.wait_s, self.exchanges)
        start = time.perf_counter()
        with self.recorder.timer("comm"):
            flat = self.fused.read()
            self.check_finite(flat, "parameters sent to the centre")
            into = self.staging.receivable(self.delta)
            requests = [xcomm.Irecv(self.reply, source=server, tag=TAG_REPLY),
                        xcomm.Irecv(into, source=server, tag=TAG_DELTA),
                        xcomm.Isend(self.report, dest=server, tag=TAG_REPORT),
                        xcomm.Isend(self.staging.sendable(flat), dest=server, tag=TAG_PARAMS)]
            _poll(lambda: MPI.Request.Testall(requests), WORKER_MAX_SLEEP)
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
            from theanompi.param_access import host_copy

            state = [host_copy(v) for v in self.state_vars()]
            xcomm.send({"state": state, "steps": self.iteration + 1}, dest=server, tag=TAG_STATE)

    # the session --------------------------------------------------------------------------
    def run(self) -> None:
        """Shard epochs until the server says stop; no validation here (the server validates the centre)."""
        shard_epoch = self.iteration // max(1, self.model.data.n_batch_train)  # > 0 after RESUME
        while not self.stopped:
            self.epoch = shard_epoch
            self.train_epoch(shard_epoch)
            current = np.asarray(self.recorder.train_sums(), dtype=np.float64)
            self._train_carry += current - self._train_base  # the recorder's sums restart with the epoch
            self._train_base = np.zeros(3)
            self.recorder.end_epoch(shard_epoch, {"iterations": self.iteration, "exchanges": self.exchanges})
            shard_epoch += 1
        ACTIVITY.enter("finishing")
        self.finish()
        self.recorder.write_summary({"rule": self.rule_name, **self.summary()})
        log.debug("worker %d stopped after %d steps, %d exchanges", self.index, self.iteration, self.exchanges)
        self.recorder.close()
        self.model.cleanup()


__all__ = ["EASGD", "EASGDServer", "EASGDWorker", "grant_steps"]
