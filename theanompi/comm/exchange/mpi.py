"""Host-memory exchange over MPI (strategy ``ar``), in place on numpy buffers.

Example (under ``mpiexec -n 2``)
-------
>>> from mpi4py import MPI                                  # doctest: +SKIP
>>> ex = MPIExchanger(MPI.COMM_WORLD)                       # doctest: +SKIP
>>> ex.allreduce_sum(np.ones(5, "float32"))                 # doctest: +SKIP
array([2., 2., 2., 2., 2.], dtype=float32)
>>> pending = ex.start_allreduce_sum(np.ones(5, "float32"))  # Iallreduce: in flight  # doctest: +SKIP
>>> pending.wait()                                          # doctest: +SKIP
array([2., 2., 2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from theanompi.comm.exchange.base import Exchanger, PendingSum


class MPIExchanger(Exchanger):
    """Allreduce/bcast of contiguous numpy buffers with mpi4py's buffer interface (no pickling)."""

    nonblocking = True

    def __init__(self, comm):
        super().__init__()
        self.comm = comm
        self.size = comm.Get_size()

    @staticmethod
    def _check(buf: np.ndarray) -> None:
        if type(buf) is not np.ndarray or buf.ndim != 1 or not buf.flags.c_contiguous:
            raise ValueError(f"exchange buffers must be contiguous 1-D numpy arrays, got {type(buf).__name__} "
                             f"{getattr(buf, 'shape', '')}")

    def allreduce_sum(self, buf: np.ndarray) -> np.ndarray:
        self._check(buf)
        if self.size > 1:
            self.sent.allreduce(buf, self.size)
            self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return buf

    def start_allreduce_sum(self, buf: np.ndarray) -> PendingSum:
        """``Iallreduce`` in place: the sum travels while the caller computes (it progresses inside MPI calls,
        e.g. :meth:`PendingSum.test`)."""
        self._check(buf)
        if self.size == 1:
            return PendingSum(buf)
        self.sent.allreduce(buf, self.size)
        return PendingSum(buf, self.comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM))

    def bcast(self, buf: np.ndarray, root: int = 0) -> np.ndarray:
        self._check(buf)
        if self.size > 1:
            self.sent.bcast(buf, self.size, root=self.comm.Get_rank() == root)
            self.comm.Bcast(buf, root=root)
        return buf
