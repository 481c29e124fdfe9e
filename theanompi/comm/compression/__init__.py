"""Compression of what BSP exchanges (BSP_COMPRESSION): ``cdd``'s update vectors, ``avg``'s pseudo-gradients.

=========  ====================================================  =====================================  =========
value      on the wire                                           bytes per rank and exchange, N workers  state
=========  ====================================================  =====================================  =========
none       the fp32 buffer, MPI's allreduce                      2(N-1)/N x 4 x n  (counted as a ring)   --
fp16       fp16, every message scaled by its own 2^k; fp32 sums  2(N-1)/N x 2 x n  (+2 per message)      --
bf16       bfloat16 (fp32's range); fp32 sums                    2(N-1)/N x 2 x n                        --
powersgd   rank-r factors P, Q of each matrix; vectors whole     2(N-1)/N x 4 x (sum (rows+cols) r + v)  Q, errors
=========  ====================================================  =====================================  =========

(n: the buffer's elements; v: the elements that travel whole.) ``fp16`` and ``bf16`` are one algorithm with two
codecs, :mod:`theanompi.comm.exchange.fp16` (a reduce-scatter then an allgather over point-to-point messages,
accumulated in fp32); ``BSP_EXCH_STRATEGY=ar16`` is ``ar`` with ``BSP_COMPRESSION=fp16`` spelled the old way, and
``nccl16`` the same over NCCL. ``powersgd`` is :mod:`theanompi.comm.compression.powersgd`, over the full-precision
exchanger. Each compressor is a :class:`~theanompi.comm.compression.base.Compressor`: its state is checkpointed
per worker and :meth:`~theanompi.comm.compression.base.Compressor.reset` forgets it.

Example
-------
>>> from theanompi.core.session_options import BSPOptions
>>> wire_codec(BSPOptions(exch_strategy="ar16")), wire_codec(BSPOptions(compression="powersgd"))
('fp16', None)
>>> check_compression(BSPOptions(exch_strategy="ar16", compression="bf16"))
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: BSP_COMPRESSION=bf16 with BSP_EXCH_STRATEGY=ar16: ar16 is fp16 compression \
already (ar with BSP_COMPRESSION=fp16); use BSP_EXCH_STRATEGY=ar
"""

from __future__ import annotations

from theanompi.comm.compression.base import Compressor, ExchangerSum
from theanompi.comm.compression.powersgd import PowerSGD
from theanompi.comm.exchange.base import Exchanger
from theanompi.core.errors import ConfigError
from theanompi.core.session_options import GPU_EXCH_STRATEGIES, BSPOptions

#: strategies that send fp16 whatever BSP_COMPRESSION says, and their full-precision counterparts
FP16_STRATEGIES = {"ar16": "ar", "nccl16": "nccl32"}


def check_compression(options: BSPOptions) -> None:
    """BSP_COMPRESSION fits BSP_EXCH_STRATEGY (ConfigError naming both otherwise)."""
    strategy, compression = options.exch_strategy, options.compression
    if strategy in FP16_STRATEGIES and compression not in ("none", "fp16"):
        raise ConfigError(f"BSP_COMPRESSION={compression} with BSP_EXCH_STRATEGY={strategy}: {strategy} is fp16 "
                          f"compression already ({FP16_STRATEGIES[strategy]} with BSP_COMPRESSION=fp16); use "
                          f"BSP_EXCH_STRATEGY={FP16_STRATEGIES[strategy]}")
    if strategy in GPU_EXCH_STRATEGIES and strategy not in FP16_STRATEGIES and compression != "none":
        gpu = " (fp16 between GPUs: BSP_EXCH_STRATEGY=nccl16)" if compression == "fp16" else ""
        raise ConfigError(f"BSP_COMPRESSION={compression} with BSP_EXCH_STRATEGY={strategy}: compression runs over "
                          f"the host strategy ar{gpu}; use BSP_EXCH_STRATEGY=ar or BSP_COMPRESSION=none")


def compression_of(options: BSPOptions) -> str:
    """The compression a session runs: BSP_COMPRESSION, or fp16 for ar16/nccl16."""
    return "fp16" if options.exch_strategy in FP16_STRATEGIES else options.compression


def wire_codec(options: BSPOptions) -> str | None:
    """The 16-bit codec the exchanger itself must send ('fp16', 'bf16') or None."""
    compression = compression_of(options)
    return compression if compression in ("fp16", "bf16") else None


def make_compressor(options: BSPOptions, exchanger: Exchanger, shapes: list[tuple[int, ...]], dtype) -> Compressor:
    """The compressor of ``options`` over ``exchanger`` (made with :func:`wire_codec`) for buffers laid out as
    ``shapes`` of ``dtype``."""
    compression = compression_of(options)
    if compression == "powersgd":
        return PowerSGD(exchanger, shapes, options.powersgd_rank, options.powersgd_start_iter, options.seed, dtype)
    return ExchangerSum(exchanger, compression)


__all__ = ["Compressor", "ExchangerSum", "PowerSGD", "check_compression", "compression_of", "make_compressor",
           "wire_codec"]
