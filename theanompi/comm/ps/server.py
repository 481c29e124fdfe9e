"""The parameter server: holds row shards of tables and answers its clients' requests.

One :class:`TableServer` serves any number of tables for a fixed set of client
ranks over a communicator. It runs wherever the caller puts it: a dedicated rank
(the ASGD rule) or a spawned process (the Multiverso API).

Modes
-----
* async: adds are applied as they arrive, gets are answered at once.
* sync:  every client's i-th get of a table returns identical values: a get
  waits until every client has asked for its i-th get; the adds a client sent
  before its i-th get are all in it, and none sent after. A client that ends
  (DONE) while others wait for a get round it will never join turns that wait
  into an error reply naming both clients, instead of a hang.

Barriers (both modes): a BARRIER is answered once every client has sent one,
so every add sent before it is applied by then. A client that ends while
others wait in a barrier, or clients all blocked in barriers and sync gets that
can never match, get error replies naming who waits for what (no hang). A DONE
with FLAG_ACK is answered once every client has sent DONE (a collective shutdown).

Bounded staleness (async, ``max_staleness`` > 0: ASGD_MAX_STALENESS): a get may carry its client's clock, the
steps it made this epoch; a get whose clock is more than ``max_staleness`` ahead of the slowest other client's is
answered only once the others have caught up (Ho et al. 2013's stale synchronous parallel). A client that finished
its epoch's steps says so (CLOCK with CLOCK_IDLE) and holds nobody back; so does one that is done or lost.

Averages: an add may carry the decay of the table's moving average (AVERAGE_WEIGHTS=ema), which the shard then
folds the new values into; a get or set flagged FLAG_AVERAGE reads or writes that average.

Staleness: every get reply carries the shard's version (number of writes applied);
an add carries the version its sender last read of that shard; staleness = versions
applied in between. A table's staleness handling (:mod:`theanompi.comm.ps.staleness`:
none, scale, compensate) adjusts each add by its own staleness before the updater
applies it; ``compensate`` keeps, per client, the values it last pulled. Per-client
statistics come back from a STATS request.

Example (dedicated server rank, clients are ranks 1..N)
-------
>>> TableServer(comm, clients=[1, 2], server_index=0, n_servers=1, sync=False).serve()  # doctest: +SKIP
"""

from __future__ import annotations

import logging

import numpy as np
from mpi4py import MPI

from theanompi.comm.fault_tolerance import acknowledge_failures, is_process_failure
from theanompi.comm.ps import protocol as P
from theanompi.comm.ps.shard import TableShard
from theanompi.comm.ps.staleness import STALENESS_MODES
from theanompi.comm.ps.updaters import UPDATERS
from theanompi.comm.traffic import SentBytes
from theanompi.core.errors import TheanoMPIError
from theanompi.core.polling import Backoff

log = logging.getLogger(__name__)


class ProtocolError(TheanoMPIError):
    """A client's request cannot be served (the reply carries this message)."""


class TableServer:
    def __init__(self, comm, clients: list[int], server_index: int, n_servers: int, sync: bool,
                 tolerate_lost_clients: bool = False, max_staleness: int = 0):
        self.comm = comm
        # bounded staleness (async): a get whose clock runs more than max_staleness ahead of the slowest client's
        # waits in `held` (client -> shard and rows) until the others catch up (0: never)
        self.max_staleness = max_staleness
        # client -> steps of this epoch at its last get (absent: idle); every client starts at 0
        self.clocks: dict[int, int] = {c: 0 for c in clients} if max_staleness else {}
        self.held: dict[int, tuple[TableShard, object]] = {}
        self.tolerate_lost_clients = tolerate_lost_clients  # async ASGD with ON_WORKER_LOSS=continue
        self.clients = list(clients)
        self.server_index, self.n_servers = server_index, n_servers
        self.sync = sync
        self.tables: dict[int, TableShard] = {}
        self.active = set(self.clients)
        self.staleness: dict[int, list[int]] = {c: [] for c in self.clients}
        self.adds = {c: 0 for c in self.clients}
        self.gets = {c: 0 for c in self.clients}
        self.in_barrier: dict[int, int] = {}  # client -> number of the barrier it waits in
        self.awaiting_shutdown: list[int] = []  # clients whose DONE asked to be answered when all are done
        self.sent = SentBytes()  # the replies this server sent (theanompi.comm.traffic; its statistics left out)

    # ----- loop -------------------------------------------------------------------------
    def serve(self) -> dict:
        """Answer requests until every client has sent DONE; returns the statistics."""
        status = MPI.Status()
        idle = Backoff(max_sleep=1e-3)  # at most 1 ms between polls when idle: don't burn a core
        while self.active:
            try:
                request = self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=P.TAG_REQUEST, status=status)
                if request:
                    idle.reset()
                    self.handle(status.Get_source())
            except MPI.Exception as err:
                self._lose_clients(err)
                continue
            if not request:
                idle.wait()
        return self.stats()

    def handle(self, source: int) -> None:
        head = np.empty(P.HEADER_LEN, dtype=np.int64)
        self.comm.Recv(head, source=source, tag=P.TAG_REQUEST)
        op, table_id, n_rows, version, flags = (int(v) for v in head[:5])
        try:
            if op == P.CREATE:
                self._create(source, head)
            elif op == P.DONE:
                self._done(source, wants_reply=bool(flags & P.FLAG_ACK))
            elif op == P.BARRIER:
                self.in_barrier[source] = version
                self._settle_collectives()
            elif op == P.STATS:
                self.comm.send(self.stats(), dest=source, tag=P.TAG_REPLY)
            elif op == P.CLOCK:
                self._clock(source, int(head[P.CLOCK_SLOT]))
            elif op == P.EXPORT:
                self._export(source, table_id)
            elif op == P.IMPORT:
                self._import(source, table_id)
            else:
                self._table_op(source, op, table_id, n_rows, version, flags, head)
        except ProtocolError as err:
            self._error(source, str(err))

    def _table_op(self, source: int, op: int, table_id: int, n_rows: int, version: int, flags: int,
                  head: np.ndarray) -> None:
        """SET, ADD and GET of a table's rows (ProtocolError for an unknown operation)."""
        shard = self.tables.get(table_id)
        rows = self._recv_rows(source, n_rows)
        if op in (P.SET, P.ADD):
            data = self._recv_payload(source, shard, rows)
            assert shard is not None  # _recv_payload refused a missing table
            self._write(shard, op, source, rows, data, version, head)
            if flags & P.FLAG_ACK:
                self._reply(source, P.header(P.OK, table_id, 0, shard.version))
        elif op == P.GET:
            if shard is None:
                raise ProtocolError(f"table {table_id} does not exist")
            if flags & P.FLAG_AVERAGE:
                self._send_average(shard, source, rows)
                return
            if flags & P.FLAG_CLOCK and self.max_staleness and not self.sync:
                self._clock(source, int(head[P.CLOCK_SLOT]))
                if self._ahead(source):
                    self.held[source] = (shard, rows)
                    return
            self._get(shard, source, n_rows, rows)
            if self.sync:
                self._settle_collectives()
        else:
            raise ProtocolError(f"unknown operation {op}")

    # ----- operations ------------------------------------------------------------------
    def _create(self, source: int, head: np.ndarray) -> None:
        _, table_id, num_row, num_col, dtype_code, updater_code, staleness_code = (int(v) for v in head[:7])
        hyper = np.empty(P.HYPER_LEN, dtype=np.float64)
        self.comm.Recv(hyper, source=source, tag=P.TAG_PAYLOAD)
        dtype = np.dtype(P.DTYPES[dtype_code])
        updater, staleness = UPDATERS[updater_code], STALENESS_MODES[staleness_code]
        start, stop = P.shard_bounds(num_row, self.n_servers)[self.server_index]
        asked = TableShard(table_id, num_row, num_col, dtype, start, stop, updater, staleness)
        shard = self.tables.get(table_id)
        if shard is None:
            shard = TableShard.create(table_id, num_row, num_col, dtype, start, stop, updater, staleness,
                                      lr=hyper[0], momentum=hyper[1], eps=hyper[2], dc_lambda=hyper[3])
            self.tables[table_id] = shard
        elif not shard.same_table(asked):
            self._error(source, f"table {table_id}: this worker asked for {asked.describe()} but it exists as "
                                f"{shard.describe()}")
            return
        self._reply(source, P.header(P.OK, table_id, 0, shard.version))

    def _export(self, source: int, table_id: int) -> None:
        """Send this server's rows of a table and its updater's state (a checkpoint: ``PSClient.export_table``)."""
        shard = self.tables.get(table_id)
        if shard is None:
            self.comm.send({"error": f"table {table_id} does not exist"}, dest=source, tag=P.TAG_REPLY)
            return
        self.comm.send({"start": shard.start, "stop": shard.stop, "values": shard.values,
                        "state": shard.updater.state()}, dest=source, tag=P.TAG_REPLY)

    def _import(self, source: int, table_id: int) -> None:
        """Overwrite the updater's state of this server's rows with what the client sends (a resumed checkpoint)."""
        state = self.comm.recv(source=source, tag=P.TAG_PAYLOAD)
        shard = self.tables.get(table_id)
        if shard is None:
            raise ProtocolError(f"table {table_id} does not exist")
        try:
            shard.updater.load_state(state)
        except ValueError as err:
            raise ProtocolError(f"table {table_id}: {err}") from None
        self._reply(source, P.header(P.OK, table_id, 0, shard.version))

    def _recv_rows(self, source: int, n_rows: int):
        if n_rows < 0:
            return None
        rows = np.empty(n_rows, dtype=np.int64)
        self.comm.Recv(rows, source=source, tag=P.TAG_PAYLOAD)
        return rows

    def _recv_payload(self, source: int, shard: TableShard | None, rows) -> np.ndarray:
        """Receive an add/set payload whatever its size, then check it against the table."""
        status = MPI.Status()
        self.comm.Probe(source=source, tag=P.TAG_PAYLOAD, status=status)
        raw = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
        self.comm.Recv(raw, source=source, tag=P.TAG_PAYLOAD)
        if shard is None:
            raise ProtocolError("the table does not exist")
        expected = (shard.values.shape[0] if rows is None else len(rows)) * shard.num_col * shard.dtype.itemsize
        if raw.size != expected:
            raise ProtocolError(f"table {shard.table_id}: payload of {raw.size} bytes, expected {expected}")
        return raw.view(shard.dtype).reshape(-1, shard.num_col)

    def _write(self, shard: TableShard, op: int, source: int, rows, data, base_version: int,
               head: np.ndarray) -> None:
        flags = int(head[4])
        if op == P.SET and flags & P.FLAG_AVERAGE:
            shard.set_average(rows, data)
        elif op == P.SET:
            shard.set(rows, data)
        else:
            lr = P.bits_float(int(head[P.LR_SLOT])) if flags & P.FLAG_LR else None
            decay = P.bits_float(int(head[P.DECAY_SLOT])) if flags & P.FLAG_AVERAGE else None
            self.staleness[source].append(shard.add(source, rows, data, base_version, lr=lr, decay=decay))
            self.adds[source] += 1

    def _send_average(self, shard: TableShard, client: int, rows) -> None:
        data = shard.pulled_average(rows)
        self._reply(client, P.header(P.OK, shard.table_id, data.shape[0], shard.version))
        self._reply(client, data)

    # ----- bounded staleness (ASGD_MAX_STALENESS) -----------------------------------------
    def _clock(self, client: int, clock: int) -> None:
        """``client``'s clock (steps this epoch; CLOCK_IDLE: it finished them); answer the gets it releases."""
        if clock == P.CLOCK_IDLE:
            self.clocks.pop(client, None)
        else:
            self.clocks[client] = clock
        self._release_held()

    def _ahead(self, client: int) -> bool:
        """Whether ``client``'s clock is more than max_staleness steps ahead of the slowest other active client
        that is still stepping."""
        others = [c for c, clock in self.clocks.items() if c != client and c in self.active]
        return bool(others) and self.clocks[client] > min(self.clocks[c] for c in others) + self.max_staleness

    def _release_held(self) -> None:
        for client in sorted(self.held):
            if client not in self.active:
                del self.held[client]
            elif not self._ahead(client):
                shard, rows = self.held.pop(client)
                self._send_values(shard, client, rows)

    def _get(self, shard: TableShard, source: int, n_rows: int, rows) -> None:
        if not self.sync:
            self._send_values(shard, source, rows)
            return
        shard.waiting[source] = rows
        self._complete_sync_round(shard)

    def _complete_sync_round(self, shard: TableShard) -> None:
        """Answer a sync get round once every client has asked; detect rounds that can't complete."""
        done_clients = set(self.clients) - self.active
        if shard.waiting and done_clients:
            waiter = min(shard.waiting)
            quitter = min(done_clients)
            round_no = shard.gets.get(waiter, 0) + 1
            for client in list(shard.waiting):
                self._error(client, f"sync mode: worker rank {client} asked for get #{round_no} of table "
                                    f"{shard.table_id}, but rank {quitter} has finished after "
                                    f"{shard.gets.get(quitter, 0)} gets; every worker must call add/get "
                                    "in the same order and number")
            shard.waiting.clear()
            return
        if len(shard.waiting) < len(self.clients):
            return
        for client, rows in sorted(shard.waiting.items()):
            self._send_values(shard, client, rows)
            shard.gets[client] = shard.gets.get(client, 0) + 1
        shard.waiting.clear()

    def _send_values(self, shard: TableShard, client: int, rows) -> None:
        data = shard.pulled(client, rows)
        self._reply(client, P.header(P.OK, shard.table_id, data.shape[0], shard.version))
        self._reply(client, data)
        self.gets[client] += 1

    def _lose_clients(self, err: BaseException) -> None:
        """A client died mid-session: forget it (if tolerated), else re-raise."""
        if not (self.tolerate_lost_clients and is_process_failure(err)):
            raise err
        for client in acknowledge_failures(self.comm):
            if client in self.active:
                self.active.discard(client)
                self.clocks.pop(client, None)
                self._release_held()
                log.warning("parameter server %d: client rank %d was lost; serving the others",
                            self.server_index, client)

    def _done(self, source: int, wants_reply: bool = False) -> None:
        self.active.discard(source)
        self.clocks.pop(source, None)
        self._release_held()
        if wants_reply:
            self.awaiting_shutdown.append(source)
        for shard in self.tables.values():
            if self.sync:
                self._complete_sync_round(shard)
        self._settle_collectives()

    # ----- barriers, collective shutdown, deadlocks ----------------------------------------
    def _settle_collectives(self) -> None:
        """Release completed barriers/shutdowns; turn waits that can never end into error replies."""
        done_clients = set(self.clients) - self.active
        if self.in_barrier and done_clients:
            quitter = min(done_clients)
            for client, number in sorted(self.in_barrier.items()):
                self._error(client, f"worker {client} waits in barrier #{number}, but worker {quitter} has shut "
                                    "down; every worker must call barrier the same number of times")
            self.in_barrier.clear()
        elif self.in_barrier and len(self.in_barrier) == len(self.clients):
            for client in sorted(self.in_barrier):
                self._reply(client, P.header(P.OK))
            self.in_barrier.clear()
        if not self.active:
            for client in self.awaiting_shutdown:
                self._reply(client, P.header(P.OK))
            self.awaiting_shutdown.clear()
        self._break_deadlock()

    def _blocked_clients(self) -> dict[int, str]:
        """Client -> what it waits for, for clients waiting in a barrier or a sync get."""
        blocked = {c: f"barrier #{n}" for c, n in self.in_barrier.items()}
        for shard in self.tables.values():
            for client in shard.waiting:
                blocked[client] = f"get #{shard.gets.get(client, 0) + 1} of table {shard.table_id}"
        return blocked

    def _break_deadlock(self) -> None:
        """Every active client blocked, none of the waits complete: answer each with an error."""
        blocked = self._blocked_clients()
        if not blocked or not self.active <= set(blocked):
            return
        waits = ", ".join(f"worker {c} waits in {what}" for c, what in sorted(blocked.items()))
        for client in sorted(blocked):
            self._error(client, f"deadlock: {waits}; every worker must call barrier, and (sync server) "
                                "add/get, in the same order and number")
        self.in_barrier.clear()
        for shard in self.tables.values():
            shard.waiting.clear()

    # ----- replies ----------------------------------------------------------------------
    def _reply(self, client: int, message: np.ndarray) -> None:
        """Send one reply message (a header, values, an error's text) to ``client``, counted in :attr:`sent`."""
        self.sent.message(message)
        self.comm.Send(message, dest=client, tag=P.TAG_REPLY)

    def _error(self, client: int, message: str) -> None:
        raw = np.frombuffer(message.encode(), dtype=np.uint8)
        self._reply(client, P.header(P.ERROR, 0, len(raw)))
        self._reply(client, np.ascontiguousarray(raw))

    def stats(self) -> dict:
        def summary(values):
            return {"mean": float(np.mean(values)) if values else 0.0, "max": int(max(values)) if values else 0}

        return {
            "server": self.server_index,
            "adds": {str(c): n for c, n in self.adds.items()},
            "gets": {str(c): n for c, n in self.gets.items()},
            "staleness": {str(c): summary(v) for c, v in self.staleness.items()},
            "tables": {str(t): s.version for t, s in self.tables.items()},
            "bytes_sent": self.sent.total,
        }
