"""NCCL on one fused GPU buffer (``cupy.cuda.nccl``): strategy ``nccl32``, and the transport of ``nccl16``.

The NCCL unique id is created on rank 0 and broadcast over MPI; every rank then
joins one ``NcclCommunicator`` (across hosts too: NCCL bootstraps over TCP).
NCCL needs one rank per GPU: :func:`check_one_rank_per_gpu` compares the ranks'
(host, PCI bus id) first and refuses two ranks on one GPU with one line, where
NCCL itself would hang or fail obscurely. Everything here needs CuPy with NCCL
(``pip install 'theanompi[cuda]'``) and runs on the current CUDA stream.

Example (under ``mpiexec -n 2``, one GPU per rank)
-------
>>> import cupy                                           # doctest: +SKIP
>>> from mpi4py import MPI                                # doctest: +SKIP
>>> ex = Nccl32Exchanger(MPI.COMM_WORLD)                  # doctest: +SKIP
>>> ex.allreduce_sum(cupy.ones(3, "float32"))             # doctest: +SKIP
array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

import socket

import numpy as np

from theanompi.comm.exchange.base import Exchanger
from theanompi.comm.exchange.transport import Transport
from theanompi.comm.traffic import SentBytes
from theanompi.core.errors import ConfigError

CUDA_EXTRA = "pip install 'theanompi[cuda]'"


def require_cupy(strategy: str, nccl: bool = False) -> None:
    """ConfigError (one line naming the ``[cuda]`` extra) unless CuPy (and its NCCL, if ``nccl``) loads."""
    try:
        import cupy  # noqa: F401,PLC0415 - cupy is optional (CUDA only)
    except ImportError:
        raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r} needs CuPy{' with NCCL' if nccl else ''}; "
                          f"install the [cuda] extra: {CUDA_EXTRA}") from None
    if nccl:
        try:
            from cupy.cuda import nccl as _nccl  # noqa: PLC0415 - cupy is optional (CUDA only)
        except ImportError:
            _nccl = None
        if _nccl is None or not getattr(_nccl, "available", True):
            raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r}: CuPy cannot load NCCL (libnccl); "
                              f"install the [cuda] extra ({CUDA_EXTRA}) or use cudampi/ar")


def nccl_dtype(dtype) -> int:
    from cupy.cuda import nccl  # noqa: PLC0415 - cupy is optional (CUDA only)

    table = {"float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64,
             "int32": nccl.NCCL_INT32, "int64": nccl.NCCL_INT64, "int8": nccl.NCCL_INT8, "uint8": nccl.NCCL_UINT8}
    name = np.dtype(dtype).name
    if name not in table:
        raise ValueError(f"NCCL cannot move {name} buffers; allowed: {', '.join(table)}")
    return table[name]


def check_one_rank_per_gpu(comm, strategy: str) -> None:
    """ConfigError on every rank if two ranks of ``comm`` use the same GPU (NCCL refuses that)."""
    import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

    here = (socket.gethostname(), cupy.cuda.Device().pci_bus_id)
    everyone = comm.allgather(here)
    first: dict[tuple[str, str], int] = {}
    for rank, gpu in enumerate(everyone):
        if gpu in first:
            raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r}: ranks {first[gpu]} and {rank} share GPU {gpu[1]} on "
                              f"{gpu[0]}; NCCL needs one rank per GPU (use cudampi or ar to share a GPU)")
        first[gpu] = rank


def nccl_communicator(comm, strategy: str):
    """One NcclCommunicator over the ranks of the mpi4py ``comm`` (collective)."""
    from cupy.cuda import nccl  # noqa: PLC0415 - cupy is optional (CUDA only)

    check_one_rank_per_gpu(comm, strategy)
    uid = nccl.get_unique_id() if comm.Get_rank() == 0 else None
    uid = comm.bcast(uid, root=0)  # a small tuple of ints
    return nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())


def _stream() -> int:
    import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

    return cupy.cuda.get_current_stream().ptr


class NcclTransport(Transport):
    """Grouped NCCL send/recv of CuPy buffers (one ``groupStart``/``groupEnd`` per exchange)."""

    pairwise_rounds = False  # NCCL schedules a group's messages itself

    def __init__(self, comm, strategy: str = "nccl16"):
        require_cupy(strategy, nccl=True)
        import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

        self.xp = cupy
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.nccl_comm = nccl_communicator(comm, strategy)  # also with one rank: the same code path
        self.sent = SentBytes()

    def exchange(self, sends, recvs) -> None:
        from cupy.cuda import nccl  # noqa: PLC0415 - cupy is optional (CUDA only)

        stream = _stream()
        self.sent.message(*(buf for _, buf in sends))
        nccl.groupStart()
        try:
            for peer, buf in sends:
                self.nccl_comm.send(buf.data.ptr, buf.size, nccl_dtype(buf.dtype), peer, stream)
            for peer, buf in recvs:
                self.nccl_comm.recv(buf.data.ptr, buf.size, nccl_dtype(buf.dtype), peer, stream)
        finally:
            nccl.groupEnd()

    def bcast(self, buf, root: int = 0):
        self.sent.bcast(buf, self.size, root=self.rank == root)
        self.nccl_comm.bcast(buf.data.ptr, buf.size, nccl_dtype(buf.dtype), root, _stream())
        return buf


class Nccl32Exchanger(Exchanger):
    """NCCL allreduce (in place, full precision) and broadcast of one CuPy buffer.

    NCCL calls return once enqueued on the current CUDA stream, so the inherited
    :meth:`~theanompi.comm.exchange.base.Exchanger.start_allreduce_sum` does not wait for the sum (``nonblocking``):
    a bucket's allreduce is queued behind the kernels that computed its gradients (the same stream, so it runs
    after them and before the kernels queued later; a separate communication stream, as DDP uses, is not built).
    """

    memory = "device"
    nonblocking = True

    def __init__(self, comm):
        super().__init__()
        self.transport = NcclTransport(comm, "nccl32")
        self.sent = self.transport.sent  # its broadcasts go through the transport
        self.size = self.transport.size

    def allreduce_sum(self, buf):
        from cupy.cuda import nccl  # noqa: PLC0415 - cupy is optional (CUDA only)

        ptr = buf.data.ptr
        self.sent.allreduce(buf, self.size)
        self.transport.nccl_comm.allReduce(ptr, ptr, buf.size, nccl_dtype(buf.dtype), nccl.NCCL_SUM, _stream())
        return buf

    def bcast(self, buf, root: int = 0):
        return self.transport.bcast(buf, root)
