"""Strategy ``cudampi``: MPI on GPU buffers, through host memory when MPI is not CUDA-aware.

Open MPI built with CUDA support exports ``MPIX_Query_cuda_support()`` (its
``cuda`` MPI extension, which mpi4py does not expose); :func:`cuda_aware_mpi`
calls it through ctypes on the libmpi this process loaded. When it answers 1,
CuPy buffers go to mpi4py as they are (mpi4py reads ``__dlpack__`` /
``__cuda_array_interface__``); otherwise :class:`MPIStaging` copies them to the host
and back, and the exchanger warns once.

:class:`MPIStaging` is also what rules with their own messages (EASGD, GOSGD,
ASGD) use to hand fused buffers to ``Send``/``Recv``; on NumPy buffers it costs
nothing.

Example
-------
>>> import numpy as np
>>> staging = MPIStaging(cuda_aware=False)
>>> buf = np.arange(3.0)
>>> staging.sendable(buf) is buf, staging.receivable(buf) is buf      # host buffers go as they are
(True, True)
>>> cuda_aware_mpi() in (True, False)                                  # doctest: +SKIP
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

import numpy as np

from theanompi.backend import arrays
from theanompi.comm.exchange.base import Exchanger, PendingSum

log = logging.getLogger("theanompi")


def _libmpi_path() -> str | None:
    """The libmpi mapped into this process (mpi4py loaded it), else the one the linker would find."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libmpi.so" in path:
                    return path
    except OSError:
        pass
    return ctypes.util.find_library("mpi")


@functools.lru_cache(maxsize=1)
def cuda_aware_mpi() -> bool:
    """Whether the MPI library can read and write GPU memory (Open MPI's ``MPIX_Query_cuda_support()``).

    False when the library lacks the query (other MPIs, Open MPI without the ``cuda``
    extension) or cannot be opened. Call after MPI is initialised (``from mpi4py import MPI``).
    """
    from mpi4py import MPI  # noqa: F401,PLC0415 - initialises MPI, which the query needs

    path = _libmpi_path()
    if not path:
        return False
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY) if os.path.isabs(path) else ctypes.CDLL(path)
    except OSError:
        return False
    query = getattr(lib, "MPIX_Query_cuda_support", None)
    if query is None:
        return False
    query.restype = ctypes.c_int
    return bool(query())


class MPIStaging:
    """Buffers MPI can use for a (NumPy or CuPy) fused buffer: the buffer itself, or a host mirror.

    ``cuda_aware`` None asks :func:`cuda_aware_mpi`. Pattern::

        comm.Send(staging.sendable(buf), dest)          # device array, or its host copy
        into = staging.receivable(buf); comm.Recv(into, src)   # the buffer, or a host array
        staging.landed(into, buf)                       # host array -> device (no-op otherwise)
    """

    def __init__(self, cuda_aware: bool | None = None):
        self.cuda_aware = cuda_aware_mpi() if cuda_aware is None else bool(cuda_aware)

    def sendable(self, buf):
        """``buf`` itself (host, or CUDA-aware MPI: its stream synchronised first) or a host copy."""
        if isinstance(buf, np.ndarray):
            return buf
        if self.cuda_aware:
            arrays.namespace_of(buf).cuda.get_current_stream().synchronize()
            return buf
        return arrays.to_host(buf)

    def receivable(self, buf):
        """Where MPI should receive ``buf``'s new values: ``buf`` itself or a new host array like it."""
        if isinstance(buf, np.ndarray):
            return buf
        if self.cuda_aware:
            arrays.namespace_of(buf).cuda.get_current_stream().synchronize()
            return buf
        return np.empty(buf.shape, dtype=buf.dtype)

    def landed(self, received, buf):
        """Make ``buf`` hold what MPI wrote into ``received`` (a host-to-device copy when staged); return ``buf``."""
        if received is not buf:
            buf[...] = arrays.namespace_of(buf).asarray(received)
        return buf


class CudaMPIExchanger(Exchanger):
    """Allreduce/bcast over MPI on device buffers; host-staged (with one warning) without CUDA-aware MPI."""

    memory = "device"
    nonblocking = True

    def __init__(self, comm, cuda_aware: bool | None = None):
        super().__init__()
        self.comm = comm
        self.size = comm.Get_size()
        self.staging = MPIStaging(cuda_aware)
        if not self.staging.cuda_aware and comm.Get_rank() == 0:
            log.warning("BSP_EXCH_STRATEGY=cudampi: this MPI is not CUDA-aware (MPIX_Query_cuda_support() is 0); "
                        "buffers are staged through host memory")

    def allreduce_sum(self, buf):
        if self.size > 1:
            from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

            staged = self.staging.sendable(buf)  # buf itself, or a fresh host copy reduced in place
            self.sent.allreduce(staged, self.size)
            self.comm.Allreduce(MPI.IN_PLACE, staged, op=MPI.SUM)
            self.staging.landed(staged, buf)
        return buf

    def start_allreduce_sum(self, buf) -> PendingSum:
        """``Iallreduce`` on ``buf`` itself (CUDA-aware MPI, its stream synchronised first) or on a host copy that
        is written back to ``buf`` when the sum completes."""
        if self.size == 1:
            return PendingSum(buf)
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

        staged = self.staging.sendable(buf)
        self.sent.allreduce(staged, self.size)
        return PendingSum(buf, self.comm.Iallreduce(MPI.IN_PLACE, staged, op=MPI.SUM),
                          on_done=lambda: self.staging.landed(staged, buf))

    def bcast(self, buf, root: int = 0):
        if self.size > 1:
            staged = self.staging.sendable(buf)
            self.sent.bcast(staged, self.size, root=self.comm.Get_rank() == root)
            self.comm.Bcast(staged, root=root)
            self.staging.landed(staged, buf)
        return buf
