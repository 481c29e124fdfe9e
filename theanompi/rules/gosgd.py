"""GOSGD: gossip SGD (Blot et al., 2016, arXiv:1611.09726) -- N workers, no server.

Protocol
--------
Every worker ``i`` keeps a weight ``a_i`` (``1/N`` at the start, all workers start
from rank 0's parameters) and trains on its own shard with the model's one-function
local step (``sync_type='local'``). After every local step it

1. **receives**: merges every message waiting for it (``MPI.Iprobe`` on a private
   ``comm.Dup()``, then a receive into one preallocated buffer), message by message:
   ``x <- (a_i x + a_j x_j) / (a_i + a_j)``, ``a_i <- a_i + a_j`` (:func:`merge`);
2. **pushes** with probability ``p``: halves ``a_i`` and sends ``(x_i, a_i)`` (the
   halved weight) to a peer ``j != i`` drawn uniformly. The message is one buffer of
   the params' dtype whose first slots hold the float64 weight (:func:`pack_message`),
   sent with ``Isend`` through the MPI buffer interface (no pickling) from a private
   copy, so a push never waits for a busy or finished peer and two workers pushing to
   each other at the same moment cannot deadlock. Requests are kept and tested; their
   buffers are recycled.

The weights always sum to 1 over workers and in-flight messages; the model the
session ends with is the weighted consensus ``sum_i a_i x_i / sum_i a_i``.

Epoch boundaries
----------------
``WorkerLoop.run`` validates after every epoch with blocking allreduces over the
workers, so all workers run the same number of epochs (checked before training) and
meet at every epoch boundary. Workers may have different numbers of training batches
(a shorter shard is allowed): a worker that finishes its epoch enters a non-blocking
``Ibarrier`` and keeps receiving and merging (short sleeps between polls, so a waiting
rank leaves the CPU to the ranks still computing) until every worker has finished the
epoch. Only then do the blocking validation allreduces start -- no worker is training,
so nobody pushes while a peer sits in a blocking collective. Messages still in flight
are merged at the next step. The wait is part of the epoch's last iteration's
``comm`` time.

End
---
After the last epoch's ``Ibarrier`` nobody sends any more. Before that epoch's
validation, :meth:`GOSGDWorker.conclude` exchanges the per-peer counts of sent
messages (``Alltoall``), receives exactly the missing ones, completes every
``Isend``, checks that the weights sum to 1 and replaces every worker's parameters by
the consensus (a float64 reduce and broadcast of ``[a_i x_i, a_i]``, so every worker
holds the same bits). The last epoch's validation -- the session's final accuracy --
is therefore the consensus's, and the consensus is saved as the final model (earlier
epochs validate each worker's own model on its validation shard).
``summary.json`` gets the sum of weights and, per worker, pushes, merges (``idle_merges``:
those done while waiting for peers), steps, batches and the matrices of messages
sent/received.

Averaged weights
----------------
With ``AVERAGE_WEIGHTS=ema`` each worker keeps a moving average of its own parameters (updated after each local
step, before it gossips, with the decay of N batches) and the average travels with them: a message is
``(x_i, average_i)`` with the halved weight, a merge mixes both with the same coefficients. The weighted sum of the
averages over the workers (and the messages in flight) is then the moving average of the consensus, and the final
model is the consensus of the averages (:meth:`GOSGDWorker.conclude`). Messages are twice as long.

Checkpoints
-----------
At a checkpoint epoch every worker is already at the epoch boundary (nobody pushes);
:meth:`GOSGDWorker.drain` receives every message still in flight, so the saved
parameters and weights (``worker_rule_state``) are a consistent cut whose weights sum
to 1. ``RESUME`` gives every worker its own parameters, optimizer state and weight;
the push sequence restarts from a generator seeded with (SEED, worker, epoch).

Choice of ``p`` (``GOSGD_P``, default 0.1)
------------------------------------------
A worker pushes on average every ``1/p`` = 10 steps: the models drift apart for about
as long as in local SGD with an averaging period of 10 (BSP ``avg`` with
``BSP_AVG_FREQ=10``), while each worker sends one parameter message per 10 steps and
never waits for anybody. Pushing more often is not better per step: a message's weight
takes no SGD steps while it travels, and with ``p=1`` a large share of the total weight
is in flight at any time. On the digits MLP (3 workers, hidden 32, 3 epochs, one run
each) the consensus reached 92.6 % with ``p=0.1`` and 77.8 % with ``p=1`` (BSP ``avg``
averaging every step: 93.3 %).
Memory: each push holds one buffer copy until the peer has received it.

Example
-------
>>> from theanompi import GOSGD
>>> rule = GOSGD()
>>> rule.init(devices=["cpu0", "cpu1", "cpu2"], modelfile="theanompi.models.mlp",
...           modelclass="MLP", p=0.2, n_epochs=10)          # doctest: +SKIP
>>> rule.wait()                                              # doctest: +SKIP
0
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from theanompi.comm.traffic import SentBytes
from theanompi.core.polling import poll_until
from theanompi.core.session_options import GOSGDOptions
from theanompi.models.contract import SyncType
from theanompi.rules.base import Rule
from theanompi.runtime.agreement import check_agreement
from theanompi.runtime.model_build import BuiltWorker, build_worker
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.worker_loop import WorkerLoop
from theanompi.session.recorder import Recorder
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")

#: Tag of gossip messages on the rule's private communicator.
GOSSIP_TAG = 1611
#: Longest sleep (seconds) between two polls while waiting for peers.
MAX_POLL_SLEEP_S = 5e-4
#: Largest allowed ``|sum of weights - 1|`` at the end.
WEIGHT_TOLERANCE = 1e-9
#: Send buffers kept for reuse once their Isend completed.
MAX_FREE_BUFFERS = 4




# ----- message arithmetic (pure numpy) -------------------------------------------------
def header_slots(dtype) -> int:
    """Elements of ``dtype`` that hold the float64 weight at the head of a message.

    Example
    -------
    >>> header_slots("float32"), header_slots("float64"), header_slots("float16")
    (2, 1, 4)
    """
    return max(1, -(-8 // np.dtype(dtype).itemsize))


def pack_message(x: np.ndarray, weight: float, out: np.ndarray) -> np.ndarray:
    """Write ``weight`` (float64, in the head slots) and ``x`` (the rest) into ``out``.

    Example
    -------
    >>> buf = pack_message(np.arange(3, dtype="float32"), 0.125, np.empty(5, "float32"))
    >>> x, w = unpack_message(buf)
    >>> x.tolist(), w
    ([0.0, 1.0, 2.0], 0.125)
    """
    k = header_slots(out.dtype)
    out[:k].view(np.float64)[0] = weight
    out[k:] = x
    return out


def unpack_message(buf: np.ndarray) -> tuple[np.ndarray, float]:
    """``(params view, weight)`` of a message written by :func:`pack_message`."""
    k = header_slots(buf.dtype)
    return buf[k:], float(buf[:k].view(np.float64)[0])


def merge(x: np.ndarray, a: float, x_j: np.ndarray, a_j: float) -> float:
    """Merge a received ``(x_j, a_j)`` into ``x`` in place; return the new weight ``a + a_j``.

    ``x <- (a x + a_j x_j) / (a + a_j)``, computed as ``x += a_j/(a+a_j) * (x_j - x)``.

    Example
    -------
    >>> x = np.array([0.0, 4.0], "float32")
    >>> merge(x, 0.25, np.array([2.0, 0.0], "float32"), 0.25), x.tolist()
    (0.5, [1.0, 2.0])
    """
    total = a + a_j
    x += x.dtype.type(a_j / total) * (x_j - x)
    return total


# ----- the rule --------------------------------------------------------------------------
class GOSGD(Rule):
    """Gossip SGD: random pushes of (params, half weight) between workers; consensus at the end."""

    name = "GOSGD"
    options_class = GOSGDOptions

    @classmethod
    def run_rank(cls, ctx: RankContext) -> None:
        GOSGDWorker.create(ctx).run()


class GOSGDWorker(WorkerLoop[GOSGDOptions]):
    """One gossip worker: local steps, pushes/merges after each, consensus in :meth:`conclude`.

    ``gossip_comm`` carries the gossip messages and their barriers apart from other traffic; ``mpi`` is mpi4py's
    ``MPI`` module (passed in: importing it starts MPI, and the launcher imports the rules).

    Example
    -------
    >>> GOSGDWorker.create(ctx).run()            # inside a rank  # doctest: +SKIP
    """

    rule_name = "GOSGD"
    sync_type = SyncType.LOCAL

    def __init__(self, ctx: RankContext, comm: Any, built: BuiltWorker, options: GOSGDOptions, gossip_comm: Any,
                 mpi: Any):
        super().__init__(ctx, comm, built, options)
        self.size, self.rank = self.comm.size, self.comm.rank
        self.weight = 1.0 / self.size
        self.p = float(options.p)
        self.sent = np.zeros(self.size, dtype=np.int64)      # messages sent to each peer
        self.received = np.zeros(self.size, dtype=np.int64)  # messages received from each peer
        self.idle_merges = 0  # merged while waiting for peers at an epoch boundary
        self.traffic = SentBytes()  # the bytes of the start, the pushes and the consensus (theanompi.comm.traffic)
        self.pending: list[tuple[Any, np.ndarray]] = []  # (Isend request, its buffer)
        self.free: list[np.ndarray] = []
        self._at_boundary = False
        self._concluded = False
        self.sum_weights = float("nan")
        self.conclude_s = 0.0
        self._final: dict[str, Any] = {}
        self._mpi = mpi
        self.gcomm = gossip_comm
        self.rng = self.push_generator(start_epoch=0)
        # what gossips: the params, followed by their moving average with AVERAGE_WEIGHTS=ema
        self.state_size = self.fused.size * (2 if self.average is not None else 1)
        self.recv_buf = np.empty(header_slots(self.fused.dtype) + self.state_size, dtype=self.fused.dtype)
        self._status = mpi.Status()

    @classmethod
    def create(cls, ctx: RankContext, comm: Any = None) -> GOSGDWorker:
        """Open the gossip channel (collective), build the model, construct the worker (``comm``: the workers'
        communicator, the session's by default)."""
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI; the launcher imports the rules

        comm = ctx.comm if comm is None else comm
        gossip_comm = comm.Dup()
        built = build_worker(ctx, comm, cls.sync_type, "host", Recorder(ctx.spec.run_dir, write=comm.rank == 0))
        return cls(ctx, comm, built, ctx.options_as(GOSGDOptions), gossip_comm, MPI)

    def push_generator(self, start_epoch: int) -> np.random.Generator:
        """The generator of this worker's push decisions and peers, for a session that starts at ``start_epoch``."""
        return np.random.default_rng([self.options.seed, self.rank, 1611, start_epoch])

    def start_rule(self) -> None:
        """Check the workers agree, start from rank 0's params (or the checkpoint's, :meth:`resumed_weight`)."""
        comm = self.comm
        # checkpoints inside an epoch meet every worker at the same step: their shards must be as long
        same_steps = {"n_batch_train": self.model.data.n_batch_train} if self.options.checkpoint_every_iters else {}
        check_agreement(comm, n_params=self.fused.size, param_dtype=str(self.fused.dtype), n_epochs=self.n_epochs,
                        **same_steps)
        if self.restored is None:
            flat = self.fused.read()
            self.traffic.bcast(flat, self.size, root=self.rank == 0)
            comm.Bcast(flat, root=0)  # every worker starts from rank 0's params
            self.fused.write(self.fused.buffer)
        else:
            self.weight = self.resumed_weight(self.restored, self.restored_worker)
        self.rng = self.push_generator(self.start_epoch)

    def resumed_weight(self, payload: dict[str, Any], slot: int | None) -> float:
        """This worker's gossip weight after a resume (collective): its own saved weight, ``1/N`` for a worker that
        joins; at another number of workers, the weights renormalised to sum to 1 (a lost worker's share goes to
        the others in proportion)."""
        states = payload.get("worker_rule_state") or []
        saved = states[slot].get("weight") if slot is not None and slot < len(states) else None
        weight = float(saved) if isinstance(saved, float | int) else 1.0 / self.size
        if int(payload["n_workers"]) == self.size and slot is not None:
            return weight
        total = float(self.comm.allreduce(weight))
        if self.rank == 0:
            log.info("GOSGD: the weights of %d workers renormalised to sum to 1 (they summed to %.6f)",
                     self.size, total)
        return weight / total

    def world_size_note(self) -> str:
        return ("workers that continue keep their parameters and weight, workers that join start from the weighted "
                "consensus with weight 1/N; the weights are renormalised to sum to 1")

    def sync_inside_epoch(self) -> None:
        """Every worker at the same step before a checkpoint inside an epoch (messages merged while waiting)."""
        if not self._at_boundary:
            self.wait_for_peers()

    # ----- exchanges -----------------------------------------------------------------
    def gossip_state(self) -> np.ndarray:
        """What a message carries and a merge mixes: the params, then (AVERAGE_WEIGHTS=ema) their average."""
        params = self.fused.read()
        if self.average is None:
            return params
        return np.concatenate([params, self.average.params.values.astype(params.dtype)])

    def adopt_gossip_state(self, state: np.ndarray) -> None:
        """Take a merged :meth:`gossip_state` back: the params, and the average."""
        n = self.fused.size
        self.fused.write(state[:n])
        if self.average is not None:
            self.average.params.values[...] = state[n:]

    def push(self) -> int:
        """Halve the weight and Isend ``(params, weight)`` to a random peer; return the peer."""
        self.reap()
        peer = int(self.rng.integers(self.size - 1))
        peer += peer >= self.rank
        params = self.gossip_state()
        self.check_finite(params[:self.fused.size], "parameters pushed to a peer")
        self.weight *= 0.5
        buf = self.free.pop() if self.free else np.empty_like(self.recv_buf)
        pack_message(params, self.weight, buf)
        self.traffic.message(buf)
        request = self.gcomm.Isend([buf, self._mpi.BYTE], dest=peer, tag=GOSSIP_TAG)
        self.pending.append((request, buf))
        self.sent[peer] += 1
        return peer

    def reap(self) -> None:
        """Forget completed Isends (their buffers become reusable)."""
        still = []
        for request, buf in self.pending:
            if request.Test():
                if len(self.free) < MAX_FREE_BUFFERS:
                    self.free.append(buf)
            else:
                still.append((request, buf))
        self.pending = still

    def _receive(self, source: int, x: np.ndarray) -> None:
        self.gcomm.Recv([self.recv_buf, self._mpi.BYTE], source=source, tag=GOSSIP_TAG, status=self._status)
        nbytes = self._status.Get_count(self._mpi.BYTE)
        if nbytes != self.recv_buf.nbytes:
            raise RuntimeError(f"GOSGD: message of {nbytes} bytes from worker {source}; "
                               f"expected {self.recv_buf.nbytes}")
        x_j, a_j = unpack_message(self.recv_buf)
        self.weight = merge(x, self.weight, x_j, a_j)
        self.received[source] += 1

    def receive_all(self) -> int:
        """Merge every message that has arrived; return how many."""
        n, x = 0, None
        while self.gcomm.Iprobe(source=self._mpi.ANY_SOURCE, tag=GOSSIP_TAG, status=self._status):
            if x is None:
                x = self.gossip_state()
            self._receive(self._status.Get_source(), x)
            n += 1
        if x is not None:
            self.adopt_gossip_state(x)
        return n

    def wait_for_peers(self) -> None:
        """Ibarrier with every worker; merge incoming messages while it is pending."""
        barrier = self.gcomm.Ibarrier()
        ACTIVITY.progress("meeting the other workers", waiting=True)

        def everyone_arrived() -> bool:
            self.idle_merges += self.receive_all()  # drain before testing: nothing waits in the queue
            self.reap()
            return barrier.Test()

        poll_until(everyone_arrived, max_sleep=MAX_POLL_SLEEP_S)
        self._at_boundary = True

    # ----- WorkerLoop hooks --------------------------------------------------------------
    def step(self, count: int) -> None:
        self._at_boundary = False
        super().step(count)
        if self.average is not None:  # this worker's share of the consensus's average, before it gossips
            self.average.update(self.size, self.epoch)
        with self.recorder.timer("comm"):
            self.receive_all()
            if self.size > 1 and self.rng.random() < self.p:
                self.push()
            if count == self.model.data.n_batch_train - 1:
                self.wait_for_peers()

    def update_average(self) -> None:
        """Done inside :meth:`step`, before the gossip (the average travels with the params)."""

    def end_of_epoch(self, epoch: int) -> None:
        """Meet the others (if a step did not already); after the last epoch adopt the consensus,
        so that the epoch's validation -- and the session's final accuracy -- is the consensus's."""
        if not self._at_boundary:  # e.g. a subclass stopped early: collectives must still line up
            self.wait_for_peers()
        if epoch == self.n_epochs - 1:
            self.conclude()

    def rule_state(self) -> dict[str, Any]:
        """Saved in checkpoints: this worker's gossip weight."""
        return {"weight": self.weight}

    def before_checkpoint(self, epoch: int) -> None:
        """Every message in flight is merged before the parameters and weights are saved."""
        self.drain()

    def drain(self) -> None:
        """Receive every message still in flight and complete every Isend.

        Collective over the workers; call it once every worker has passed its last push
        (after :meth:`wait_for_peers`).
        """
        MPI = self._mpi
        expected = np.empty_like(self.sent)
        self.gcomm.Alltoall(self.sent, expected)  # expected[j]: messages worker j sent me
        missing = expected - self.received
        if (missing < 0).any():
            raise RuntimeError(f"GOSGD: received more messages than were sent: {self.received} > {expected}")
        if missing.any():
            x = self.gossip_state()
            for source in np.flatnonzero(missing):
                for _ in range(int(missing[source])):
                    self._receive(int(source), x)
            self.adopt_gossip_state(x)
        MPI.Request.Waitall([request for request, _ in self.pending])
        self.pending.clear()
        self.free.clear()

    def conclude(self) -> None:
        """Drain the messages in flight, then every worker adopts the weighted consensus (collective)."""
        MPI = self._mpi
        start = time.perf_counter()
        self.drain()
        consensus = np.empty(self.state_size + 1, dtype=np.float64)
        np.multiply(self.gossip_state(), self.weight, out=consensus[:-1])
        consensus[-1] = self.weight
        # reduce + bcast rather than allreduce: every worker gets bit-identical parameters
        self.traffic.reduce(consensus, self.size, root=self.rank == 0)
        self.traffic.bcast(consensus, self.size, root=self.rank == 0)
        self.comm.Reduce(MPI.IN_PLACE if self.rank == 0 else consensus, consensus if self.rank == 0 else None,
                         op=MPI.SUM, root=0)
        self.comm.Bcast(consensus, root=0)
        total = float(consensus[-1])
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise RuntimeError(f"GOSGD: the workers' weights sum to {total!r}, not 1")
        self.fused.write(consensus[:self.fused.size], scale=1.0 / total)
        if self.average is not None:  # the consensus of the averages: the average of the consensus
            self.average.params.values[...] = consensus[self.fused.size:-1] / total
        self.sum_weights = total
        self.conclude_s = time.perf_counter() - start
        self._concluded = True

    def finish(self) -> None:
        """Conclude (if the last epoch did not), gather the gossip statistics, free the communicator."""
        if not self._concluded:
            if not self._at_boundary:
                self.wait_for_peers()
            self.conclude()
        stats = np.array([self.sent.sum(), self.received.sum(), self.idle_merges, self.iteration,
                          self.model.data.n_batch_train, self.weight], dtype=np.float64)
        every = np.empty((self.size, stats.size), dtype=np.float64)
        self.comm.Allgather(stats, every)
        sent = np.empty((self.size, self.size), dtype=np.int64)
        received = np.empty((self.size, self.size), dtype=np.int64)
        self.comm.Allgather(self.sent, sent)
        self.comm.Allgather(self.received, received)
        self.gcomm.Free()
        self._final = {
            "p": self.p,
            "sum_weights": self.sum_weights,
            "weights": every[:, 5].tolist(),  # each worker's weight before the consensus
            "pushes": every[:, 0].astype(int).tolist(),
            "merges": every[:, 1].astype(int).tolist(),
            "idle_merges": every[:, 2].astype(int).tolist(),
            "steps": every[:, 3].astype(int).tolist(),
            "n_batch_train": every[:, 4].astype(int).tolist(),
            "messages_sent": sent.tolist(),          # [i][j]: i sent to j
            "messages_received": received.tolist(),  # [i][j]: i received from j
            "conclude_s": round(self.conclude_s, 6),
        }
        if self.rank == 0:
            log.info("gossip: %d pushes, %d merges, sum of weights %.12f", int(every[:, 0].sum()),
                     int(every[:, 1].sum()), self.sum_weights)

    def summary(self) -> dict[str, Any]:
        return dict(self._final)

    def bytes_sent(self) -> int:
        return self.traffic.total

    def worker_record(self) -> dict[str, Any]:
        """This worker's counters for ``summary.json``'s ``per_worker`` list."""
        return {**super().worker_record(), "pushes": int(self.sent.sum()), "merges": int(self.received.sum()),
                "idle_merges": self.idle_merges}
