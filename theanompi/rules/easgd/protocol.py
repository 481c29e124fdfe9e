"""What EASGD's server and workers agree on: message tags and layouts, poll ceilings, and the
session start both sides run (see :mod:`theanompi.rules.easgd` for the protocol).

Example
-------
>>> dict(zip(REPLY_FIELDS, (4, 0)))
{'grant': 4, 'send_state': 0}
>>> len(REPORT_FIELDS)
7
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theanompi.comm.traffic import SentBytes
from theanompi.runtime.agreement import check_agreement
from theanompi.runtime.rank_context import RankContext

RULE_NAME = "EASGD"
#: Message tags on the exchange communicator.
TAG_REPORT, TAG_PARAMS, TAG_REPLY, TAG_DELTA, TAG_STATE = 41, 42, 43, 44, 45
#: Reply (int64): the next grant of local steps (0: stop) and whether to send the state now.
REPLY_FIELDS = ("grant", "send_state")
#: Report header (float64): steps since the last exchange, training loss*n, error*n and n of those
#: steps, the worker's total exchange time so far, its number of completed exchanges, and the bytes its exchanges
#: have sent, this one's included (theanompi.comm.traffic; a state snapshot carries the same count in "bytes_sent").
REPORT_FIELDS = ("steps", "loss_sum", "error_sum", "samples", "wait_s", "exchanges", "bytes_sent")
#: Longest sleep between two polls (seconds): the server's and a waiting worker's.
SERVER_MAX_SLEEP = 1e-3
WORKER_MAX_SLEEP = 1e-3


@dataclass(frozen=True)
class Connection:
    """A rank's place in an EASGD session: the communicator of the ranks of its role (the workers', or the server
    alone), the exchange's own communicator over the whole session, the server's rank and the workers' ranks."""

    role_comm: Any
    exchange_comm: Any
    server_rank: int
    worker_ranks: list[int]


def connect(ctx: RankContext) -> Connection:
    """This rank's :class:`Connection`; collective over the session."""
    role_comm = ctx.role_comm()
    exchange_comm = ctx.comm.Dup()  # the exchange's own message space
    return Connection(role_comm, exchange_comm, ctx.ranks_with_role("server")[0], ctx.ranks_with_role("worker"))


def take_start_point(exchange_comm, fused, root: int, resumed: bool, staging, sent: SentBytes) -> None:
    """Every rank checks the parameter layout, then takes ``root``'s initial parameters
    (unless the session resumes a checkpoint: then every rank has its own already); ``sent`` counts the broadcast."""
    check_agreement(exchange_comm, n_params=fused.size, param_dtype=str(fused.dtype))
    if not resumed:
        flat = fused.read()
        buf = staging.sendable(flat)
        sent.bcast(buf, exchange_comm.size, root=exchange_comm.rank == root)
        exchange_comm.Bcast(buf, root=root)
        fused.write(staging.landed(buf, flat))
