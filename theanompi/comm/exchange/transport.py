"""Point-to-point transports: the one primitive that algorithms over several links need.

A :class:`Transport` posts a batch of sends and receives at once and returns
when all completed (NCCL: one ``groupStart``/``groupEnd`` group; MPI:
``Isend``/``Irecv`` + ``Waitall``). The fp16 allreduce (``theanompi.comm.exchange.fp16``)
is written once over it and runs on MPI with host buffers, on CUDA-aware MPI
with device buffers and on NCCL.

Example (under ``mpiexec -n 2``)
-------
>>> from mpi4py import MPI                                                   # doctest: +SKIP
>>> t = MPITransport(MPI.COMM_WORLD)                                         # doctest: +SKIP
>>> mine, theirs = np.full(3, t.rank, "float32"), np.empty(3, "float32")     # doctest: +SKIP
>>> t.exchange(sends=[(1 - t.rank, mine)], recvs=[(1 - t.rank, theirs)])    # doctest: +SKIP
>>> theirs                                                                   # on rank 0  # doctest: +SKIP
array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import ModuleType
from typing import ClassVar

import numpy as np

from theanompi.comm.exchange.cudampi import MPIStaging
from theanompi.comm.traffic import SentBytes

TAG = 6061


class Transport(ABC):
    """Grouped point-to-point messages between the ranks of one communicator."""

    rank: int
    size: int
    xp: ModuleType  # array module of the buffers it moves (numpy or cupy)
    sent: SentBytes  # what its sends and broadcasts sent (theanompi.comm.traffic)

    @abstractmethod
    def exchange(self, sends: list[tuple[int, object]], recvs: list[tuple[int, object]]) -> None:
        """Send each ``(peer, buf)`` of ``sends``, receive into each ``(peer, buf)`` of ``recvs``; wait for all.

        At most one send and one receive per peer; buffers are contiguous and must not overlap.
        """

    @abstractmethod
    def bcast(self, buf, root: int = 0):
        """Replace ``buf`` with ``root``'s copy (full precision); return it."""

    #: whether :meth:`exchange_with_all` goes in pairwise rounds (MPI) or as one grouped :meth:`exchange` (NCCL,
    #: which schedules a group's messages itself)
    pairwise_rounds: ClassVar[bool] = True

    def exchange_with_all(self, sends: list[tuple[int, object]], recvs: list[tuple[int, object]]) -> None:
        """:meth:`exchange` with many peers, in N-1 rounds: round k sends to rank + k and receives from rank - k
        (mod N), so every rank sends one message and receives one at a time.

        Posted all at once over TCP, the N-1 senders to one rank share its link and overflow its queue: on 4
        tools/netsim hosts at 50 Mbit/s the fp16 allreduce of a 4.3 MB buffer took 1.20 s at once and 0.99 s in
        rounds (its bytes need 0.54 s; ``benchmarks/slow_links.py --parts allreduce``).
        """
        if not self.pairwise_rounds:
            self.exchange(sends, recvs)
            return
        to_peer, from_peer = dict(sends), dict(recvs)
        for shift in range(1, self.size):
            to, source = (self.rank + shift) % self.size, (self.rank - shift) % self.size
            self.exchange(sends=[(to, to_peer[to])] if to in to_peer else [],
                          recvs=[(source, from_peer[source])] if source in from_peer else [])


class MPITransport(Transport):
    """Transport over an mpi4py communicator (duplicated, so its messages never meet the caller's).

    ``xp`` is numpy for host buffers or cupy for GPU buffers, which go to MPI directly
    when it is CUDA-aware and through host copies otherwise
    (:class:`theanompi.comm.exchange.cudampi.MPIStaging`).
    """

    def __init__(self, comm, xp: ModuleType = np, cuda_aware: bool | None = None):
        self.comm = comm.Dup()
        self.sent = SentBytes()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.xp = xp
        self.staging = MPIStaging(cuda_aware if xp is not np else False)

    def exchange(self, sends, recvs) -> None:
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI (the launcher loads this module)

        landing = [(self.staging.receivable(buf), buf) for _, buf in recvs]
        requests = [self.comm.Irecv([into, MPI.BYTE], source=peer, tag=TAG)
                    for (peer, _), (into, _) in zip(recvs, landing)]
        self.sent.message(*(buf for _, buf in sends))
        requests += [self.comm.Isend([self.staging.sendable(buf), MPI.BYTE], dest=peer, tag=TAG) for peer, buf in sends]
        MPI.Request.Waitall(requests)
        for into, buf in landing:
            self.staging.landed(into, buf)

    def bcast(self, buf, root: int = 0):
        staged = self.staging.sendable(buf)
        self.sent.bcast(staged, self.size, root=self.rank == root)
        self.comm.Bcast(staged, root=root)
        return self.staging.landed(staged, buf)
