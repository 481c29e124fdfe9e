"""Exchangers: one interface (:class:`Exchanger`), one module per transport.

``make_exchanger(strategy, comm)`` picks the transport by Theano-MPI's strategy
names (BSP_EXCH_STRATEGY):

========  =======  ==========================================================
strategy  buffers  how
========  =======  ==========================================================
ar        host     MPI allreduce (``mpi.py``)
ar16      host     fp16 on the wire, fp32 accumulation, over MPI (``fp16.py``)
nccl32    GPU      NCCL allreduce of one fused buffer (``nccl.py``)
nccl16    GPU      fp16 on the wire, fp32 accumulation, over NCCL send/recv
cudampi   GPU      MPI on device buffers; host-staged if MPI is not CUDA-aware
========  =======  ==========================================================

An exchanger's ``memory`` ("host" or "device") tells a rule where its fused
buffer must live (``theanompi.params.FusedParams(..., where=...)``).

Example
-------
>>> from theanompi.devices import parse_devices
>>> check_strategy("ar16", parse_devices("cpu0,cpu1"))
>>> check_strategy("nccl32", parse_devices("cpu0"))
Traceback (most recent call last):
...
theanompi.errors.ConfigError: BSP_EXCH_STRATEGY='nccl32' exchanges GPU buffers and needs cuda devices; ...
"""

from __future__ import annotations

from theanompi.errors import ConfigError
from theanompi.exchange.base import Exchanger

HOST_STRATEGIES = ("ar", "ar16")
GPU_STRATEGIES = ("nccl32", "nccl16", "cudampi")
STRATEGIES = HOST_STRATEGIES + GPU_STRATEGIES


def check_strategy(strategy: str, devices) -> None:
    """ConfigError if ``strategy`` cannot move buffers between ``devices`` (or its libraries are missing here)."""
    if strategy in GPU_STRATEGIES and not all(d.is_cuda for d in devices):
        raise ConfigError(
            f"BSP_EXCH_STRATEGY={strategy!r} exchanges GPU buffers and needs cuda devices; "
            f"with cpu devices use: {', '.join(HOST_STRATEGIES)}"
        )
    if strategy in GPU_STRATEGIES and any(d.is_local for d in devices):
        from theanompi.exchange.nccl import require_cupy

        require_cupy(strategy, nccl=strategy.startswith("nccl"))


def make_exchanger(strategy: str, comm) -> Exchanger:
    """The exchanger for ``strategy`` over the mpi4py communicator ``comm`` (collective)."""
    if strategy == "ar":
        from theanompi.exchange.mpi import MPIExchanger

        return MPIExchanger(comm)
    if strategy in ("ar16", "nccl16"):
        from theanompi.exchange.fp16 import Fp16Exchanger

        if strategy == "ar16":
            from theanompi.exchange.transport import MPITransport

            return Fp16Exchanger(MPITransport(comm))
        from theanompi.exchange.nccl import NcclTransport

        return Fp16Exchanger(NcclTransport(comm, strategy))
    if strategy == "nccl32":
        from theanompi.exchange.nccl import Nccl32Exchanger

        return Nccl32Exchanger(comm)
    if strategy == "cudampi":
        from theanompi.exchange.cudampi import CudaMPIExchanger

        return CudaMPIExchanger(comm)
    raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r} is not available; use one of: {', '.join(STRATEGIES)}")
