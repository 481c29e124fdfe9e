"""Exchangers: one interface (:class:`Exchanger`), one module per transport.

``make_exchanger(strategy, comm)`` picks the transport by Theano-MPI's strategy
names (BSP_EXCH_STRATEGY):

========  =======  ==========================================================
strategy  buffers  how
========  =======  ==========================================================
ar        host     MPI allreduce (``mpi.py``)
ar16      host     fp16 on the wire, fp32 accumulation, over MPI (``fp16.py``): BSP_COMPRESSION=fp16
nccl32    GPU      NCCL allreduce of one fused buffer (``nccl.py``)
nccl16    GPU      fp16 on the wire, fp32 accumulation, over NCCL send/recv
cudampi   GPU      MPI on device buffers; host-staged if MPI is not CUDA-aware
========  =======  ==========================================================

An exchanger's ``memory`` ("host" or "device") tells a rule where its fused
buffer must live (``theanompi.comm.fused_params.FusedParams(..., where=...)``).

Example
-------
>>> from theanompi.core.devices import parse_devices
>>> check_strategy("ar16", parse_devices("cpu0,cpu1"))
>>> check_strategy("nccl32", parse_devices("cpu0"))
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: BSP_EXCH_STRATEGY='nccl32' exchanges GPU buffers and needs cuda devices; ...
"""

from __future__ import annotations

from theanompi.comm.exchange.base import Exchanger
from theanompi.core.errors import ConfigError
from theanompi.core.session_options import GPU_EXCH_STRATEGIES, HOST_EXCH_STRATEGIES

# the strategies' names are BSP_EXCH_STRATEGY's values in the option table; make_exchanger implements each
HOST_STRATEGIES = HOST_EXCH_STRATEGIES
GPU_STRATEGIES = GPU_EXCH_STRATEGIES
STRATEGIES = HOST_STRATEGIES + GPU_STRATEGIES


def check_strategy(strategy: str, devices) -> None:
    """ConfigError if ``strategy`` cannot move buffers between ``devices`` (or its libraries are missing here)."""
    if strategy in GPU_STRATEGIES and not all(d.is_cuda for d in devices):
        raise ConfigError(
            f"BSP_EXCH_STRATEGY={strategy!r} exchanges GPU buffers and needs cuda devices; "
            f"with cpu devices use: {', '.join(HOST_STRATEGIES)}"
        )
    if strategy in GPU_STRATEGIES and any(d.is_local for d in devices):
        from theanompi.comm.exchange.nccl import require_cupy  # noqa: PLC0415 - a transport loads only where used

        require_cupy(strategy, nccl=strategy.startswith("nccl"))


def make_exchanger(strategy: str, comm, half: str | None = None) -> Exchanger:
    """The exchanger for ``strategy`` over the mpi4py communicator ``comm`` (collective).

    ``half`` ('fp16' or 'bf16', from BSP_COMPRESSION): sums with that 16-bit codec on the wire
    (:mod:`theanompi.comm.exchange.fp16`); ``ar16`` and ``nccl16`` are fp16 already.
    """
    wire16 = {"ar16": "fp16", "nccl16": "fp16"}.get(strategy, half)
    if half is not None and half != wire16 or wire16 is not None and strategy not in ("ar", "ar16", "nccl16"):
        raise ConfigError(f"BSP_COMPRESSION={half}: BSP_EXCH_STRATEGY={strategy!r} cannot send {half} "
                          "(the 16-bit codecs run over ar; nccl16 is fp16 over NCCL)")
    if wire16 is not None:
        from theanompi.comm.exchange.fp16 import CODECS, HalfExchanger  # noqa: PLC0415 - loaded only where used

        if strategy == "nccl16":
            from theanompi.comm.exchange.nccl import NcclTransport  # noqa: PLC0415 - loaded only where used

            return HalfExchanger(NcclTransport(comm, strategy), CODECS[wire16])
        from theanompi.comm.exchange.transport import MPITransport  # noqa: PLC0415 - loaded only where used

        return HalfExchanger(MPITransport(comm), CODECS[wire16])
    if strategy == "ar":
        from theanompi.comm.exchange.mpi import MPIExchanger  # noqa: PLC0415 - imports mpi4py, which starts MPI

        return MPIExchanger(comm)
    if strategy == "nccl32":
        from theanompi.comm.exchange.nccl import Nccl32Exchanger  # noqa: PLC0415 - a transport loads only where used

        return Nccl32Exchanger(comm)
    if strategy == "cudampi":
        from theanompi.comm.exchange.cudampi import CudaMPIExchanger  # noqa: PLC0415 - loaded only where used

        return CudaMPIExchanger(comm)
    raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r} is not available; use one of: {', '.join(STRATEGIES)}")
