"""The bytes a rank's exchanges hand to MPI to send: ``bytes_sent`` in ``summary.json`` and in every epoch's record.

Each owner of an exchange keeps one :class:`SentBytes` and counts where it hands a buffer to MPI: an exchanger
(BSP's sums, :mod:`theanompi.comm.exchange`; the fp16 allreduce counts in its transport), the parameter-server client
and server (ASGD, :mod:`theanompi.comm.ps`), EASGD's worker and server, a GOSGD worker. What a call counts:

* a point-to-point message (``Send``, ``Isend``; the parameters, a delta, a request's header): its payload, the
  buffer's ``nbytes`` (a pickled message, EASGD's optimizer-state snapshot: the bytes of the arrays it carries);
* an allreduce of an ``n``-byte buffer over ``N`` ranks: ``2 (N-1) n / N`` on every rank -- what each rank sends in a
  ring allreduce (reduce-scatter, then allgather), the least any allreduce sends per rank on average. With 2 ranks
  it is ``n``, what every algorithm sends; with more, Open MPI's choice for small buffers (recursive doubling) sends
  up to ``log2(N) n`` per rank, and its hierarchical collectives send less between hosts than within;
* a broadcast of ``n`` bytes over ``N`` ranks: ``(N-1) n`` at the root, nothing elsewhere -- the total any broadcast
  sends (a tree spreads it over the ranks that forward it);
* a reduce of ``n`` bytes to a root: ``n`` on every other rank (what a tree reduce sends).

Counted: the parameter traffic of training -- the start (the initial parameters broadcast, ASGD's table set),
every exchange with its small header messages (EASGD's report and grant, the parameter server's request headers
and acknowledgements), GOSGD's final consensus. Not counted: the bookkeeping around it (agreement checks, the
epoch's metric sums, the summaries gathered at the end, EASGD's first grants, the parameter servers' statistics),
nor what MPI adds (its own headers, TCP/IP, acknowledgements), nor the launcher's traffic. A resumed session counts
from its own start.

Example
-------
>>> import numpy as np
>>> sent = SentBytes()
>>> sent.message(np.zeros(10, "float32"), np.zeros(2, "int64"))    # 40 + 16 bytes
>>> sent.allreduce(np.zeros(100, "float32"), size=4)                # 2 * 3/4 * 400
>>> sent.bcast(np.zeros(100, "float32"), size=4, root=True)         # 3 * 400
>>> sent.total
1856
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def payload_bytes(obj: Any) -> int:
    """Bytes of the arrays in ``obj``: an array (NumPy, CuPy: its ``nbytes``), ``bytes``, or a list, tuple or dict
    of them (an mpi4py buffer spec ``[buf, MPI.BYTE]``, a pickled message's contents); anything else counts 0.

    >>> import numpy as np
    >>> payload_bytes({"state": [np.zeros(3), np.zeros(2, "float32")], "steps": 7}), payload_bytes(b"abc")
    (32, 3)
    """
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(obj, Mapping):
        return sum(payload_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_bytes(v) for v in obj)
    return 0


def allreduce_bytes(nbytes: int, size: int) -> int:
    """What each of ``size`` ranks sends in a ring allreduce of ``nbytes``.

    >>> allreduce_bytes(1000, 2), allreduce_bytes(1000, 4), allreduce_bytes(1000, 1)
    (1000, 1500, 0)
    """
    return 2 * (size - 1) * nbytes // size


class SentBytes:
    """A running count of the bytes one owner's exchanges handed to MPI to send (see the module docstring)."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0

    def message(self, *buffers: Any) -> None:
        """Point-to-point messages of these buffers (or a pickled message's contents) were sent."""
        self.total += sum(payload_bytes(b) for b in buffers)

    def allreduce(self, buf: Any, size: int) -> None:
        """This rank took part in an allreduce of ``buf`` over ``size`` ranks."""
        self.total += allreduce_bytes(payload_bytes(buf), size)

    def bcast(self, buf: Any, size: int, root: bool) -> None:
        """A broadcast of ``buf`` over ``size`` ranks; ``root``: whether this rank is its root."""
        if root:
            self.total += (size - 1) * payload_bytes(buf)

    def reduce(self, buf: Any, size: int, root: bool) -> None:
        """A reduce of ``buf`` over ``size`` ranks to a root; ``root``: whether this rank is it."""
        if not root and size > 1:
            self.total += payload_bytes(buf)
