"""Exchangers: one interface (:class:`Exchanger`), one module per transport.

``make_exchanger(strategy, comm, devices)`` picks the transport by Theano-MPI's
strategy names. On CPU workers only ``ar`` (host MPI allreduce) applies.
"""

from __future__ import annotations

from theanompi.errors import ConfigError
from theanompi.exchange.base import Exchanger

HOST_STRATEGIES = ("ar",)
GPU_STRATEGIES = ("nccl32", "nccl16", "cudampi")
STRATEGIES = HOST_STRATEGIES + GPU_STRATEGIES


def check_strategy(strategy: str, devices) -> None:
    """ConfigError if ``strategy`` cannot move buffers between ``devices``."""
    if strategy in GPU_STRATEGIES and not all(d.is_cuda for d in devices):
        raise ConfigError(
            f"BSP_EXCH_STRATEGY={strategy!r} exchanges GPU buffers and needs cuda devices; "
            f"with cpu devices use: {', '.join(HOST_STRATEGIES)}"
        )
    if strategy in GPU_STRATEGIES:
        raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r}: GPU exchangers are not available in this build yet; use 'ar'")


def make_exchanger(strategy: str, comm) -> Exchanger:
    """The exchanger for ``strategy`` over communicator ``comm``."""
    if strategy == "ar":
        from theanompi.exchange.mpi import MPIExchanger

        return MPIExchanger(comm)
    raise ConfigError(f"BSP_EXCH_STRATEGY={strategy!r} is not available; use one of: {', '.join(HOST_STRATEGIES)}")
