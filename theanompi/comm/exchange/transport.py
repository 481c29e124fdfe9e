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
