"""Client side of the parameter server: create tables, add deltas, get values.

Rows of every table are sharded contiguously over the servers
(:func:`theanompi.comm.ps.protocol.shard_bounds`); the client splits requests and
joins replies, so callers see whole tables.

Example (a worker; servers are ranks 0 and 1 of ``comm``)
-------
>>> client = PSClient(comm, servers=[0, 1])                         # doctest: +SKIP
>>> t = client.create_table(0, num_row=10, num_col=1, dtype="float32", updater="add")  # doctest: +SKIP
>>> client.add(t, np.ones((10, 1), "float32")); client.get(t)[:2, 0]  # doctest: +SKIP
array([1., 1.], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from theanompi.comm.ps import protocol as P
from theanompi.comm.ps.staleness import STALENESS_MODES
from theanompi.comm.ps.updaters import UPDATERS
from theanompi.comm.traffic import SentBytes
from theanompi.core.errors import TheanoMPIError
from theanompi.core.polling import poll_until


class ServerError(TheanoMPIError):
    """The server refused a request (its message says why)."""


@dataclass
class TableRef:
    table_id: int
    num_row: int
    num_col: int
    dtype: np.dtype
    bounds: list  # per server [start, stop)
    # server -> the version of its shard in the values this client last read there (sent with each add: the
    # server measures the add's staleness against it)
    versions: dict = field(default_factory=dict)


class PSClient:
    def __init__(self, comm, servers: list[int]):
        self.comm = comm
        self.servers = list(servers)
        self._done = False
        self.sent = SentBytes()  # every message this client sent (theanompi.comm.traffic)

    # ----- helpers ------------------------------------------------------------------------
    def _send(self, buf: np.ndarray, dest: int, tag: int) -> None:
        """Send one message to a server (every message of the client goes here, counted in :attr:`sent`)."""
        self.sent.message(buf)
        self.comm.Send(buf, dest=dest, tag=tag)

    def _await_reply(self, server: int) -> None:
        """Wait for a reply that may take long (a barrier) without spinning a core: poll, backing off to 2 ms."""
        poll_until(lambda: self.comm.Iprobe(source=server, tag=P.TAG_REPLY), max_sleep=2e-3)

    def _reply_header(self, server: int, patient: bool = False) -> tuple[np.ndarray, str | None]:
        """A reply header and, for an error reply, its message (consumed from the wire)."""
        if patient:
            self._await_reply(server)
        head = np.empty(P.HEADER_LEN, dtype=np.int64)
        self.comm.Recv(head, source=server, tag=P.TAG_REPLY)
        if head[0] == P.ERROR:
            raw = np.empty(int(head[2]), dtype=np.uint8)
            self.comm.Recv(raw, source=server, tag=P.TAG_REPLY)
            return head, raw.tobytes().decode()
        return head, None

    def _acks(self, servers, patient: bool = False) -> None:
        """Consume one acknowledgement from each server, then raise the first error, if any."""
        errors = [err for _, err in (self._reply_header(srv, patient) for srv in servers) if err]
        if errors:
            raise ServerError(errors[0])

    def _check_open(self) -> None:
        if self._done:
            raise TheanoMPIError("the parameter-server client was shut down")

    def _split_rows(self, table: TableRef, rows):
        """Per server: (server, local row ids or None, positions in the request)."""
        if rows is None:
            return [(srv, None, slice(start, stop)) for srv, (start, stop) in zip(self.servers, table.bounds)]
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= table.num_row):
            bad = rows[(rows < 0) | (rows >= table.num_row)][0]
            raise IndexError(f"row id {bad} is outside 0..{table.num_row - 1}")
        parts = []
        for srv, (start, stop) in zip(self.servers, table.bounds):
            pos = np.nonzero((rows >= start) & (rows < stop))[0]
            if pos.size:
                parts.append((srv, rows[pos] - start, pos))
        return parts

    # ----- API ----------------------------------------------------------------------------
    def create_table(self, table_id: int, num_row: int, num_col: int, dtype="float32", updater: str = "add",
                     lr: float = 0.1, momentum: float = 0.9, eps: float = 1e-8, staleness: str = "none",
                     dc_lambda: float = 2.0) -> TableRef:
        """Create (or join) a table on every server; all clients must agree on its shape, updater and
        ``staleness`` handling (:mod:`theanompi.comm.ps.staleness`)."""
        self._check_open()
        dtype = np.dtype(dtype)
        if dtype.name not in P.DTYPES:
            raise ValueError(f"table dtype {dtype.name!r} is not supported; use one of: {', '.join(P.DTYPES)}")
        if updater not in UPDATERS:
            raise ValueError(f"table updater {updater!r} is not supported; use one of: {', '.join(UPDATERS)}")
        if staleness not in STALENESS_MODES:
            raise ValueError(f"table staleness {staleness!r} is not supported; "
                             f"use one of: {', '.join(STALENESS_MODES)}")
        head = P.header(P.CREATE, table_id, num_row, num_col, P.DTYPES.index(dtype.name),
                        UPDATERS.index(updater), STALENESS_MODES.index(staleness))
        hyper = np.array([lr, momentum, eps, dc_lambda], dtype=np.float64)
        for srv in self.servers:
            self._send(head, dest=srv, tag=P.TAG_REQUEST)
            self._send(hyper, dest=srv, tag=P.TAG_PAYLOAD)
        self._acks(self.servers)
        return TableRef(table_id, num_row, num_col, dtype, P.shard_bounds(num_row, len(self.servers)))

    def _write(self, op: int, table: TableRef, data, rows=None, ack: bool = True, flags: int = 0,
               extra: tuple[int, ...] = ()) -> None:
        self._check_open()
        data = np.asarray(data)
        n = table.num_row if rows is None else len(np.asarray(rows).ravel())
        if data.size != n * table.num_col:
            raise ValueError(f"table {table.table_id}: got {data.size} values for {n} rows of {table.num_col}")
        data = np.ascontiguousarray(data.reshape(n, table.num_col), dtype=table.dtype)
        flags |= P.FLAG_ACK if ack else 0
        parts = self._split_rows(table, rows)
        for srv, local, pos in parts:
            n_rows = -1 if local is None else len(local)
            version = table.versions.get(srv, 0)  # what this server's shard was at this client's last read
            self._send(P.header(op, table.table_id, n_rows, version, flags, *extra), dest=srv, tag=P.TAG_REQUEST)
            if local is not None:
                self._send(np.ascontiguousarray(local), dest=srv, tag=P.TAG_PAYLOAD)
            self._send(np.ascontiguousarray(data[pos]), dest=srv, tag=P.TAG_PAYLOAD)
        if ack:
            self._acks([srv for srv, _, _ in parts])

    def set(self, table: TableRef, data, rows=None, average: bool = False) -> None:
        """Overwrite values (acknowledged): master initialisation; ``average=True``: the table's moving average."""
        self._write(P.SET, table, data, rows, ack=True, flags=P.FLAG_AVERAGE if average else 0)

    def add(self, table: TableRef, delta, rows=None, sync: bool = False, lr: float | None = None,
            decay: float | None = None) -> None:
        """Push a delta through the table's updater; ``sync=True`` waits until it is applied. ``lr``: the learning
        rate of this add (a scheduled one; default the table's); ``decay``: fold the new values into the table's
        moving average with this decay."""
        flags = (P.FLAG_LR if lr is not None else 0) | (P.FLAG_AVERAGE if decay is not None else 0)
        extra = (P.float_bits(lr if lr is not None else 0.0), P.float_bits(decay if decay is not None else 0.0))
        self._write(P.ADD, table, delta, rows, ack=sync, flags=flags, extra=extra)

    def clock(self, value: int) -> None:
        """Tell every server this client's clock (steps this epoch; P.CLOCK_IDLE: it finished them, so it holds
        nobody back): bounded staleness."""
        self._check_open()
        for srv in self.servers:
            self._send(P.header(P.CLOCK, 0, -1, 0, 0, value), dest=srv, tag=P.TAG_REQUEST)

    def get(self, table: TableRef, rows=None, clock: int | None = None, average: bool = False) -> np.ndarray:
        """The table's values (all rows, or ``rows`` in the order given); ``average=True``: its moving average.
        ``clock`` (this client's steps this epoch) lets a server with bounded staleness hold the answer until the
        slowest client is close enough."""
        self._check_open()
        parts = self._split_rows(table, rows)
        n = table.num_row if rows is None else len(np.asarray(rows).ravel())
        out = np.empty((n, table.num_col), dtype=table.dtype)
        flags = (P.FLAG_CLOCK if clock is not None else 0) | (P.FLAG_AVERAGE if average else 0)
        for srv, local, _ in parts:
            n_rows = -1 if local is None else len(local)
            self._send(P.header(P.GET, table.table_id, n_rows, 0, flags, clock or 0), dest=srv, tag=P.TAG_REQUEST)
            if local is not None:
                self._send(np.ascontiguousarray(local), dest=srv, tag=P.TAG_PAYLOAD)
        errors = []
        for srv, _local, pos in parts:
            head, err = self._reply_header(srv, patient=clock is not None)
            if err:
                errors.append(err)
                continue
            if not average:
                table.versions[srv] = int(head[3])
            buf = np.empty((int(head[2]), table.num_col), dtype=table.dtype)
            self.comm.Recv(buf, source=srv, tag=P.TAG_REPLY)
            out[pos] = buf
        if errors:
            raise ServerError(errors[0])
        return out

    def export_table(self, table: TableRef) -> dict:
        """The whole table and its updater's state, gathered from every server: ``{"values": (rows, cols),
        "state": {name: (rows, cols)}, "partitions": [(start, stop), ...]}`` (the fixed virtual partitions,
        :func:`~theanompi.comm.ps.protocol.partition_bounds`, whatever the number of servers)."""
        self._check_open()
        for srv in self.servers:
            self.comm.Send(P.header(P.EXPORT, table.table_id), dest=srv, tag=P.TAG_REQUEST)
        parts = [self.comm.recv(source=srv, tag=P.TAG_REPLY) for srv in self.servers]
        errors = [part["error"] for part in parts if "error" in part]
        if errors:
            raise ServerError(errors[0])
        values = np.empty((table.num_row, table.num_col), dtype=table.dtype)
        names = sorted({name for part in parts for name in part["state"]})
        state = {name: np.empty_like(values) for name in names}
        for part in parts:
            values[part["start"]:part["stop"]] = part["values"]
            for name in names:
                state[name][part["start"]:part["stop"]] = part["state"][name]
        return {"values": values, "state": state, "partitions": P.partition_bounds(table.num_row)}

    def import_table(self, table: TableRef, saved: dict) -> None:
        """Overwrite the table and its updater's state with what :meth:`export_table` gave (by any number of
        servers): each server gets its rows, whole virtual partitions, bit for bit."""
        self.set(table, saved["values"])
        for srv, (start, stop) in zip(self.servers, table.bounds):
            self.comm.Send(P.header(P.IMPORT, table.table_id), dest=srv, tag=P.TAG_REQUEST)
            rows = {name: np.ascontiguousarray(np.asarray(v)[start:stop]) for name, v in saved["state"].items()}
            self.comm.send(rows, dest=srv, tag=P.TAG_PAYLOAD)
        self._acks(self.servers)

    def stats(self) -> list[dict]:
        """Every server's statistics (adds, gets, staleness per client)."""
        self._check_open()
        for srv in self.servers:
            self._send(P.header(P.STATS), dest=srv, tag=P.TAG_REQUEST)
        return [self.comm.recv(source=srv, tag=P.TAG_REPLY) for srv in self.servers]

    def barrier(self, number: int) -> None:
        """Return once every client has called its ``number``-th barrier; every write any client sent
        before its barrier is applied by then (ServerError if the barrier can never complete)."""
        self._check_open()
        for srv in self.servers:
            self._send(P.header(P.BARRIER, 0, -1, number), dest=srv, tag=P.TAG_REQUEST)
        self._acks(self.servers, patient=True)

    def done(self, wait: bool = False) -> None:
        """Tell every server this client has finished (idempotent); ``wait``: return once every client has."""
        if not self._done:
            for srv in self.servers:
                self._send(P.header(P.DONE, flags=P.FLAG_ACK if wait else 0), dest=srv, tag=P.TAG_REQUEST)
            self._done = True
            if wait:
                self._acks(self.servers, patient=True)
