"""ASGD: asynchronous SGD through a parameter server.

Ranks: one worker per device, then ``ASGD_SERVERS`` server ranks (CPU processes on
the host of the first device); the parameters are one fused table sharded by
rows over the servers. A session starts N + ASGD_SERVERS ranks.

Workers train locally and every ``ASGD_FREQ`` steps push a delta and pull fresh
parameters:

* updater ``add``: the model steps with its own optimizer; the delta is the
  change of its parameters since the last pull (w_server += delta).
* updaters ``sgd``, ``momentum``, ``adagrad``: the model only computes gradients
  (the ``cdd`` half-step); the delta is their sum and the *server* steps
  (learning rate ``ASGD_LR``, momentum ``ASGD_MOMENTUM``; their state persists).

``ASGD_SYNC=true`` makes every worker's i-th pull return identical values; async
mode applies pushes as they arrive. With ``ON_WORKER_LOSS=continue`` (async mode
only) the servers forget a worker that dies and the others carry on: their
epoch-end collectives shrink to the survivors (``theanompi.comm.fault_tolerance``);
the lost worker's shard is no longer trained nor validated. Worker 0 (it writes
the records) and the servers cannot be lost. At every epoch end the workers' last pushes
are applied and all pull the same parameters, which are validated; the server's
parameters after the last epoch are the session's final model. Staleness (server
updates between a worker's pull and its push) is recorded per worker, and
``ASGD_STALENESS`` says what the servers make of it (``theanompi.comm.ps.staleness``):
``scale`` divides each push by its staleness (Zhang et al. 2016), ``compensate``
corrects it towards the server's current parameters (DC-ASGD, Zheng et al. 2017,
``ASGD_DC_LAMBDA``), ``none`` applies it as if it were fresh. ``ASGD_MAX_STALENESS``
bounds how far ahead of the slowest worker a worker may run (its pull waits),
``ASGD_MOMENTUM_CORRECTION=implicit`` lowers the explicit momentum for the momentum
asynchrony adds (:func:`corrected_momentum`). A server-side updater steps at ``ASGD_LR``
on the session's LR_SCHEDULE (each push carries the rate of its worker's progress);
with ``AVERAGE_WEIGHTS=ema`` the servers keep the table's moving average (each push
carries its decay), which the workers pull at every epoch's end to validate, checkpoint
and, after the last, save as the final model.

Example
-------
>>> from theanompi import ASGD
>>> ASGD().init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
...             updater="momentum", server_lr=0.05).wait()      # doctest: +SKIP
0
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from theanompi.backend.arrays import to_host
from theanompi.comm.fault_tolerance import SurvivorsComm
from theanompi.comm.ps.protocol import CLOCK_IDLE
from theanompi.core.devices import Device
from theanompi.core.errors import ConfigError
from theanompi.core.lr_schedule import LRSchedule
from theanompi.core.session_options import ASGD_WARMUP_EPOCHS, ASGD_WARMUP_START_FACTOR, ASGDOptions, SessionOptions
from theanompi.models.contract import SyncType
from theanompi.rules.base import Rule
from theanompi.runtime.agreement import check_agreement
from theanompi.runtime.model_build import BuiltWorker, build_worker
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.worker_loop import WorkerLoop
from theanompi.session.recorder import Recorder
from theanompi.session.spec import RankSpec
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")


class ASGD(Rule):
    name = "ASGD"
    supports_worker_loss = True
    options_class = ASGDOptions

    @classmethod
    def check_options(cls, devices: list[Device], options: SessionOptions) -> None:
        assert isinstance(options, ASGDOptions)
        if options.on_worker_loss == "continue" and options.sync:
            raise ConfigError("ON_WORKER_LOSS=continue needs ASGD_SYNC=false: synchronous rounds need every worker")
        if options.max_staleness and options.sync:
            raise ConfigError(f"ASGD_MAX_STALENESS={options.max_staleness} needs ASGD_SYNC=false: synchronous "
                              "pulls are never stale")

    @classmethod
    def launch_ranks(cls, devices: list[Device], options: SessionOptions) -> list[RankSpec]:
        assert isinstance(options, ASGDOptions)
        host = devices[0].host
        servers = [RankSpec(Device("cpu", i, host), "server") for i in range(options.n_servers)]
        return super().launch_ranks(devices, options) + servers

    @classmethod
    def run_rank(cls, ctx: RankContext) -> None:
        options = ctx.options_as(ASGDOptions)
        role_comm: Any = ctx.role_comm()  # an MPI.Comm, or the SurvivorsComm wrapping it (below)
        if ctx.role == "server":
            servers = ctx.ranks_with_role("server")
            ACTIVITY.enter("serving the tables")
            ACTIVITY.progress("waiting for requests", waiting=True)
            _watched_table_server()(ctx.comm, ctx.ranks_with_role("worker"), servers.index(ctx.rank), len(servers),
                        sync=options.sync, tolerate_lost_clients=options.on_worker_loss == "continue",
                        max_staleness=options.max_staleness).serve()
        else:
            if options.on_worker_loss == "continue":
                role_comm = SurvivorsComm(role_comm, "ASGD workers")
            ASGDWorker.create(ctx, role_comm).run()


def _watched_table_server() -> type:
    """TableServer whose requests are progress for the watchdog (imported here: mpi4py starts MPI on import)."""
    from theanompi.comm.ps.server import TableServer  # noqa: PLC0415 - imports mpi4py, which starts MPI

    class WatchedTableServer(TableServer):
        def handle(self, source: int) -> None:
            ACTIVITY.progress(f"a request of rank {source}")
            super().handle(source)
            ACTIVITY.progress("waiting for requests", waiting=True)

    return WatchedTableServer


def corrected_momentum(momentum: float, n_workers: int) -> float:
    """ASGD_MOMENTUM_CORRECTION=implicit: the explicit momentum that leaves N asynchronous workers the step
    amplification ``1 / (1 - momentum)`` of one worker. Asynchrony acts as an implicit momentum of about
    ``1 - 1/N`` (Mitliagkas, Zhang, Hadjis, Re, "Asynchrony begets momentum, with an application to deep learning",
    2016), which amplifies the steps N-fold; an explicit momentum ``1 - N (1 - momentum)``, at least 0, makes the
    product ``N / (1 - explicit)`` what one worker had.

    >>> corrected_momentum(0.9, 1), round(corrected_momentum(0.9, 4), 6), corrected_momentum(0.9, 16)
    (0.9, 0.6, 0.0)
    """
    return max(0.0, 1.0 - n_workers * (1.0 - momentum))


def implicit_momentum_options(model_cls: type, model_options: dict[str, Any], n_workers: int) -> dict[str, Any]:
    """A model's options with its ``momentum`` (MODEL_MOMENTUM, or its default) corrected for ``n_workers``
    asynchronous workers (:func:`corrected_momentum`); unchanged for a model without that option (logged)."""
    table, defaults = getattr(model_cls, "option_table", None), getattr(model_cls, "defaults", {})
    if table is None or "momentum" not in table or "momentum" not in defaults:
        log.warning("ASGD_MOMENTUM_CORRECTION=implicit: ModelClass %r has no momentum option; its momentum is left "
                    "as it is", model_cls.__name__)
        return model_options
    momentum = float(model_options.get("momentum", defaults["momentum"]))
    corrected = corrected_momentum(momentum, n_workers)
    log.info("ASGD_MOMENTUM_CORRECTION=implicit: the workers' momentum %g -> %g for %d asynchronous workers",
             momentum, corrected, n_workers)
    return {**model_options, "momentum": corrected}


def sync_type_for(updater: str) -> str:
    """What an ASGD worker's model compiles: ``add`` -- the model steps itself ('local'); ``sgd``, ``momentum``,
    ``adagrad`` -- it only computes the update vector and the servers step ('cdd').

    >>> sync_type_for("add"), sync_type_for("momentum")
    ('local', 'cdd')
    """
    return SyncType.LOCAL if updater == "add" else SyncType.CDD


class ASGDWorker(WorkerLoop[ASGDOptions]):
    """A worker: local steps, push/pull every ``push_freq`` steps, synchronised pulls at epoch ends.

    ``client`` talks to the server ranks, which hold ``table``: the fused parameters, sharded by rows.
    """

    rule_name = "ASGD"

    def __init__(self, ctx: RankContext, comm: Any, built: BuiltWorker, options: ASGDOptions, client: Any,
                 table: Any):
        super().__init__(ctx, comm, built, options)
        self.sync_type = sync_type_for(options.updater)
        self.client = client
        self.table = table
        # cdd: the update vectors summed since the last push (None with the add updater: nothing to sum)
        self.accumulated = np.zeros(self.fused.size, self.fused.dtype) if self.sync_type == SyncType.CDD else None
        self.pending = 0
        self.steps_this_epoch = 0
        self.exchanges = 0
        self.base = np.zeros(self.fused.size, self.fused.dtype)  # the parameters of the last pull
        self.server_stats: list = []
        self._table_export: dict | None = None  # worker 0: the servers' table for the next checkpoint
        # the sgd/momentum/adagrad updaters' ASGD_LR on the session's schedule, at this worker's progress
        self.server_lr = LRSchedule.of_session(options, comm.size, self.n_epochs)
        self.clock = options.max_staleness > 0  # bounded staleness: the pulls carry this worker's clock

    @classmethod
    def create(cls, ctx: RankContext, comm: Any) -> ASGDWorker:
        """Build the model, connect to the servers, create the table there, construct the worker (``comm``: the
        workers' communicator)."""
        from theanompi.comm.ps.client import PSClient  # noqa: PLC0415 - importing mpi4py starts MPI

        options = ctx.options_as(ASGDOptions)
        recorder = Recorder(ctx.spec.run_dir, write=comm.rank == 0)
        implicit = options.momentum_correction == "implicit"
        adjust = (lambda cls, given: implicit_momentum_options(cls, given, comm.size)) if implicit else None
        built = build_worker(ctx, comm, sync_type_for(options.updater), "host", recorder,
                             adjust_model_options=adjust if options.updater == "add" else None)
        momentum = options.server_momentum
        if implicit and options.updater == "momentum":
            momentum = corrected_momentum(options.server_momentum, comm.size)
            if comm.rank == 0:
                log.info("ASGD_MOMENTUM_CORRECTION=implicit: the servers' momentum %g -> %g for %d asynchronous "
                         "workers", options.server_momentum, momentum, comm.size)
        if comm.rank == 0 and options.warmup_epochs > 0:
            log.info("ASGD: the learning rate warms up from %g of its value over the first %g epochs (WARMUP_EPOCHS, "
                     "WARMUP_START_FACTOR; ASGD's default: %g epochs from 1/%g; WARMUP_EPOCHS=0 turns it off)",
                     options.warmup_start_factor, options.warmup_epochs, ASGD_WARMUP_EPOCHS,
                     1 / ASGD_WARMUP_START_FACTOR)
        client = PSClient(ctx.comm, ctx.ranks_with_role("server"))
        table = client.create_table(0, num_row=built.fused.size, num_col=1, dtype=built.fused.dtype,
                                    updater=options.updater, lr=options.server_lr, momentum=momentum,
                                    staleness=options.staleness, dc_lambda=options.dc_lambda)
        return cls(ctx, comm, built, options, client, table)

    def start_rule(self) -> None:
        """Worker 0 initialises the table (a resumed checkpoint's table and server state, else its parameters);
        every worker pulls the starting parameters."""
        if self.options.sync or self.options.checkpoint_every_iters:
            # sync pulls pair up across workers, checkpoints inside an epoch meet at one step: equal step counts
            check_agreement(self.comm, n_batch_train=self.model.data.n_batch_train)
        if self.comm.rank == 0:
            saved = (self.restored or {}).get("table")
            if saved is not None:
                self.restore_table(saved)
            else:
                self.client.set(self.table, self.fused.read())  # master initialisation
            if self.average is not None:  # the table's average starts at it, or at a resumed checkpoint's
                start = self.average.params.values
                self.client.set(self.table, self.fused.read() if start is None else start, average=True)
        with ACTIVITY.waiting("the start barrier"):
            self.comm.Barrier()
        self.pull()

    def restore_table(self, saved: dict) -> None:
        """Worker 0: the checkpoint's table and the servers' updater state onto this session's servers (any number
        of them: whole virtual partitions each), read back and checked bit for bit."""
        self.client.import_table(self.table, saved)
        back = self.client.export_table(self.table)
        same = np.array_equal(back["values"], saved["values"]) and sorted(back["state"]) == sorted(saved["state"]) \
            and all(np.array_equal(back["state"][k], saved["state"][k]) for k in back["state"])
        if not same:
            raise RuntimeError("ASGD: the table restored on the servers differs from the checkpoint's")
        state = ", ".join(sorted(saved["state"])) or "no updater state"
        log.info("ASGD: the checkpoint's table (%d virtual partitions) and its %s restored onto %d server(s), "
                 "bit for bit", len(saved["partitions"]), state, len(self.client.servers))

    def sync_inside_epoch(self) -> None:
        """Before a checkpoint inside an epoch: every push applied, every worker on the servers' parameters."""
        self.end_of_epoch(self.epoch)

    def before_checkpoint(self, epoch: int) -> None:
        """Worker 0 reads the table and its updater state off the servers while nobody pushes (collective)."""
        if self.comm.rank == 0:
            exported = self.client.export_table(self.table)
            exported["partitions"] = np.asarray(exported["partitions"], dtype=np.int64)
            self._table_export = exported
        with ACTIVITY.waiting("the checkpoint's table"):
            self.comm.Barrier()

    def checkpoint_extras(self) -> dict:
        """The servers' table and updater state (worker 0's checkpoint)."""
        return {"table": self._table_export} if self._table_export is not None else {}

    def pull(self, clock: int | None = None) -> None:
        with self.recorder.timer("comm"):
            values = self.client.get(self.table, clock=clock if self.clock else None).ravel()
            self.fused.write(values)
            self.base = values

    def push(self, sync: bool = False) -> None:
        with self.recorder.timer("comm"):
            if self.sync_type == SyncType.CDD:
                delta = self.accumulated
            else:
                delta = self.fused.read() - self.base
            self.check_finite(delta, "pushed delta")
            epoch_progress = self.epoch + self.steps_this_epoch / self.model.data.n_batch_train
            lr = self.server_lr.lr(self.options.server_lr, epoch_progress) if self.sync_type == SyncType.CDD else None
            decay = None if self.average is None else self.average.params.next_decay(
                self.pending, self.epoch, seen=self.pending * self.comm.size)  # one push of N workers' streams
            self.client.add(self.table, delta, sync=sync, lr=lr, decay=decay)
        if self.accumulated is not None:
            self.accumulated[:] = 0
        self.pending = 0
        self.exchanges += 1

    def step(self, count: int) -> None:
        if self.sync_type == SyncType.CDD:
            assert self.accumulated is not None  # made for cdd
            with self.recorder.timer("calc"):
                # the model's vector may be a jax array (COMPUTE=jax): the servers take host buffers
                np.add(self.accumulated, to_host(self.model.train_iter(count, self.recorder)), out=self.accumulated)
        else:
            super().step(count)
        self.pending += 1
        self.steps_this_epoch = count + 1
        if self.pending == self.options.push_freq:
            self.push()
            self.pull(clock=count + 1)

    def update_average(self) -> None:
        """The servers keep the table's average; a worker keeps that of its running statistics."""
        if self.average is not None:
            self.average.update_stats(self.comm.size, self.epoch)

    def end_of_epoch(self, epoch: int) -> None:
        """Flush the last pushes, then every worker pulls the same parameters (for validation), and their average
        (AVERAGE_WEIGHTS=ema: validated, checkpointed and, after the last epoch, the final model)."""
        if self.pending:
            self.push(sync=True)
        if self.clock:
            self.client.clock(CLOCK_IDLE)  # done with this epoch's steps: hold nobody back
        with self.recorder.timer("wait"):
            self.comm.Barrier()  # every push of this epoch has been applied
        self.pull(clock=0)
        if self.average is not None:
            with self.recorder.timer("comm"):
                self.average.params.load(self.client.get(self.table, average=True).ravel(), self.average.params.seen)
        with self.recorder.timer("wait"):
            self.comm.Barrier()  # nobody pushes again before everyone has pulled

    def finish(self) -> None:
        self.server_stats = self.client.stats() if self.comm.rank == 0 else []
        with ACTIVITY.waiting("the final barrier"):
            self.comm.Barrier()
        self.client.done()

    def worker_record(self) -> dict:
        return {**super().worker_record(), "exchanges": self.exchanges}

    def bytes_sent(self) -> int:
        """Every message this worker's parameter-server client sent."""
        return int(self.client.sent.total)

    def bytes_sent_by_rank(self, per_worker: list[dict[str, Any]]) -> list[int]:
        """The workers' (session ranks 0..N-1), then the servers' replies (ranks N.., from their statistics)."""
        return super().bytes_sent_by_rank(per_worker) + [int(stats["bytes_sent"]) for stats in self.server_stats]

    def summary(self) -> dict:
        staleness: dict[str, list] = {}
        for stats in self.server_stats:
            for client, s in stats["staleness"].items():
                staleness.setdefault(client, []).append(s)
        opts = self.options
        lost = self.comm.lost() if callable(getattr(self.comm, "lost", None)) else []
        return {
            "updater": opts.updater, "sync": opts.sync, "servers": opts.n_servers, "staleness_mode": opts.staleness,
            "push_freq": opts.push_freq, "lost_workers": lost,
            "staleness": {f"rank {c}": {"mean": float(np.mean([s["mean"] for s in v])),
                                        "max": max(s["max"] for s in v)} for c, v in staleness.items()},
        }
