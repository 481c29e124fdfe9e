"""C++ support code for the Conv2d ops: im2col/col2im + BLAS GEMM on image chunks.

All three kernels work on chunks of ``nb`` images (about ``TMPI_COLS_BUDGET``
bytes of column buffer: ``C*kh*kw`` rows of ``nb*Ho*Wo`` values, at least one
image), so each GEMM is wide while its column buffer stays in cache between
being written and being read; nothing of size ``N*C*kh*kw*Ho*Wo`` is ever
materialised. Each image is first copied into a zero-bordered scratch image,
so im2col/col2im are branch-free strided copies/adds. The forward pass adds
the optional bias while copying the GEMM result into NCHW order; the
gradients gather the matching rows of ``gy`` into one GEMM operand.

Memory: one image's column buffer is ``C*kh*kw*Ho*Wo`` values, which is large
for big images with many channels (no tiling over output rows is done).

Row-major GEMMs are issued through the Fortran interface by swapping the
operands (``C^T = B^T A^T``), so no transposed copies are made.

Example
-------
>>> from theanompi.backend.ops._conv_c import support_code
>>> "tmpi_conv2d_forward" in support_code()
True
"""

from __future__ import annotations

from pytensor.tensor.blas_headers import blas_header_text, blas_header_version

from theanompi.backend.ops._common import c_source_hash, read_c_source

#: Bump to force a rebuild (the cache key also holds a hash of the C text in csrc/).
C_CODE_VERSION = 9

_KERNELS = (read_c_source("common.h") + read_c_source("conv2d_vec.h") + read_c_source("conv2d_winograd.h")
            + read_c_source("conv2d.h"))
BIAS_SUPPORT_CODE = read_c_source("conv2d_bias.h")


def support_code() -> str:
    """BLAS prototypes plus the conv kernels (identical for all three ops)."""
    return blas_header_text() + _KERNELS


def cache_version() -> tuple:
    """Compile-cache key component for the conv ops' C code."""
    return (C_CODE_VERSION, c_source_hash(_KERNELS), *blas_header_version())


def bias_cache_version() -> tuple:
    """Compile-cache key component for Conv2dGradBias's C code."""
    return (C_CODE_VERSION, c_source_hash(BIAS_SUPPORT_CODE))


def call_code(function: str, inputs, output: str, params: str, fail: str) -> str:
    """The c_code body: call one ``tmpi_conv2d_*`` entry point, ``fail`` on error.

    ``params`` is the C name of the op's ParamsType struct (fields sh, sw, ph, pw).
    """
    args = ", ".join(inputs)
    geometry = ", ".join(f"{params}->{field}" for field in ("sh", "sw", "ph", "pw"))
    return (
        f"if ({function}({args}, &{output}, {geometry}) != 0) {{\n"
        f"    {fail}\n"
        f"}}\n"
    )
