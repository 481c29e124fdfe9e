"""C++ support code for the fused batch-norm ops (training and inference, channel axis 1).

The input is viewed as (N, C, S) with S the product of the axes after the
channel axis (1 for dense input). Statistics accumulate in double precision:
two passes (mean, then squared deviations), as numerically safe as the graph
version's ``mean``/``var``. Channels are shared out over OpenMP threads.

Example
-------
>>> from theanompi.backend.ops._batch_norm_c import SUPPORT_CODE
>>> all(f"tmpi_bn_{name}" in SUPPORT_CODE for name in ("forward", "backward", "infer"))
True
"""

from __future__ import annotations

from theanompi.backend.ops._common import c_source_hash, read_c_source

#: Bump to force a rebuild (the cache key also holds a hash of the C text in csrc/).
C_CODE_VERSION = 3

SUPPORT_CODE = read_c_source("batch_norm.h")


def cache_version() -> tuple:
    """Compile-cache key for the batch-norm ops: version plus a hash of the C text."""
    return (C_CODE_VERSION, c_source_hash(SUPPORT_CODE))
