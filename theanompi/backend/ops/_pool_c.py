"""C++ support code for the Pool2d ops (loops over (N*C) planes, shared out by OpenMP).

Max pooling follows torch: a window's maximum is replaced by a later element
only when that element is strictly greater (ties keep the first maximum) or
NaN. Average pooling divides by the full window size (zero padding counted).

Example
-------
>>> from theanompi.backend.ops._pool_c import call_code
>>> "p->kh" in call_code("tmpi_pool2d_forward", ["x"], "z", "p", "fail;")
True
"""

from __future__ import annotations

from theanompi.backend.ops._common import c_source_hash, read_c_source

#: Bump to force a rebuild (the cache key also holds a hash of the C text in csrc/).
C_CODE_VERSION = 5

SUPPORT_CODE = read_c_source("common.h") + read_c_source("pool2d.h")


_FIELDS = ("kh", "kw", "sh", "sw", "ph", "pw", "is_max")


def call_code(function, inputs, output, params, fail) -> str:
    """The c_code body: call ``function`` with the op's parameters, ``fail`` on error.

    ``params`` is the C name of the op's ParamsType struct (fields in ``_FIELDS``).
    """
    args = ", ".join(inputs)
    geometry = ", ".join(f"{params}->{field}" for field in _FIELDS)
    return (
        f"if ({function}({args}, &{output}, {geometry}) != 0) {{\n"
        f"    {fail}\n"
        f"}}\n"
    )


def cache_version() -> tuple:
    """Compile-cache key for the pool ops: version plus a hash of the C text."""
    return (C_CODE_VERSION, c_source_hash(SUPPORT_CODE))
