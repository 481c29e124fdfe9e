"""Wire format between parameter-server clients and servers (MPI point-to-point, buffer interface).

A request is a fixed int64 header (tag REQUEST) followed, from the same source, by
its payload messages (tag PAYLOAD, in order; MPI keeps their order). A reply is a
header (tag REPLY) and, for GET, the data. Tables are 2-D (rows x cols); an array
table is (size, 1). Rows are cut into fixed *virtual partitions* (:func:`partition_bounds`, at most
:data:`VIRTUAL_PARTITIONS`, set by the table's size alone) and every server holds a contiguous range of whole
partitions (:func:`shard_bounds`): a table saved by one number of servers (EXPORT: its rows and the updater's
state) maps onto any other number partition by partition, bit for bit (SET, then IMPORT of the state).

BARRIER is answered once every client has sent it. A server handles one
client's requests in the order sent, so the answer also proves that every
request the clients sent before their BARRIER has been applied.

Example
-------
>>> shard_bounds(10, 3)
[(0, 4), (4, 7), (7, 10)]
>>> len(partition_bounds(10_000)), shard_bounds(10_000, 2)
(256, [(0, 5008), (5008, 10000)])
"""

from __future__ import annotations

import numpy as np

TAG_REQUEST, TAG_PAYLOAD, TAG_REPLY = 7001, 7002, 7003
HEADER_LEN = 8

# operations
CREATE, SET, ADD, GET, STATS, DONE, BARRIER, CLOCK, EXPORT, IMPORT = range(1, 11)
# reply status
OK, ERROR = 0, 1
# header flags
FLAG_ACK = 1  # the client waits for an acknowledgement (add(..., sync=True), set, create; DONE: when all are done)
FLAG_LR = 2  # ADD: slot LR_SLOT holds the learning rate of this add (a scheduled ASGD_LR), as float64 bits
FLAG_AVERAGE = 4  # ADD: slot DECAY_SLOT holds the decay of the table's moving average for this add (float64 bits);
#                   GET / SET: the table's moving average, not its values
FLAG_CLOCK = 8  # GET: slot CLOCK_SLOT holds the client's clock (steps this epoch), for bounded staleness
#: header slots after [op, table, n_rows, version, flags]; CLOCK's header is [CLOCK, 0, -1, 0, 0, clock]
LR_SLOT, DECAY_SLOT, CLOCK_SLOT = 5, 6, 5
#: a clock that never holds anybody back: the client finished its epoch's steps
CLOCK_IDLE = -1
#: a table's dtype, updater and staleness handling travel as their index in DTYPES, in
#: theanompi.comm.ps.updaters.UPDATERS and in theanompi.comm.ps.staleness.STALENESS_MODES; CREATE's header is
#: [CREATE, table, num_row, num_col, dtype, updater, staleness], its payload [lr, momentum, eps, dc_lambda] (HYPER)
HYPER_LEN = 4
DTYPES = ("float32", "float64", "int32", "int64")


def header(op: int, table: int = 0, n_rows: int = -1, version: int = 0, flags: int = 0, *extra: int) -> np.ndarray:
    """A request/reply header: [op/status, table, n_rows (-1: all rows), version, flags, extra...]."""
    h = np.zeros(HEADER_LEN, dtype=np.int64)
    values = (op, table, n_rows, version, flags) + tuple(extra)
    h[: len(values)] = values
    return h


def float_bits(value: float) -> int:
    """A float64 as the int64 of its bits (for a header slot).

    >>> bits_float(float_bits(0.015625))
    0.015625
    """
    return int(np.float64(value).view(np.int64))


def bits_float(bits: int) -> float:
    """The float64 whose bits ``bits`` holds (:func:`float_bits`)."""
    return float(np.int64(bits).view(np.float64))


#: the most virtual partitions a table's rows are cut into (a table of fewer rows has one per row)
VIRTUAL_PARTITIONS = 256


def even_split(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into ``parts`` contiguous [start, stop) pieces, the first ones one longer."""
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def partition_bounds(num_row: int) -> list[tuple[int, int]]:
    """The fixed virtual partitions of a table of ``num_row`` rows: [start, stop) row ranges, a function of the
    table's size alone (not of the number of servers)."""
    return even_split(num_row, max(1, min(VIRTUAL_PARTITIONS, num_row)))


def shard_bounds(num_row: int, n_servers: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) row ranges of each server: whole virtual partitions, the first servers one more."""
    partitions = partition_bounds(num_row)
    bounds = []
    for first, last in even_split(len(partitions), n_servers):
        start = partitions[first][0] if first < len(partitions) else num_row
        bounds.append((start, partitions[last - 1][1] if last > first else start))
    return bounds
