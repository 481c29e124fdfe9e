"""Helpers shared by the convolution and pooling ops.

Argument normalisation (``_pair``), the output-length formula shared by
convolution and pooling, input validation that raises :class:`ValueError`
quoting the offending values, and the BLAS build flags for the C code.

Example
-------
>>> from theanompi.backend.ops._common import normalize_pair, out_length
>>> normalize_pair(2, "stride", minimum=1)
(2, 2)
>>> out_length(32, 3, stride=1, pad=1)
32
"""

from __future__ import annotations

import hashlib
import numbers
from pathlib import Path

import pytensor.tensor as pt
from pytensor.tensor.blas import ldflags
from pytensor.tensor.type import TensorType

FLOAT_DTYPES = ("float32", "float64")

#: The ops' C/C++ sources (support code included into pytensor's generated modules).
C_SOURCE_DIR = Path(__file__).resolve().parent / "csrc"


def read_c_source(name: str) -> str:
    """The text of ``csrc/<name>``.

    >>> "tmpi_bn_forward" in read_c_source("batch_norm.h")
    True
    """
    return (C_SOURCE_DIR / name).read_text()


def c_source_hash(text: str) -> str:
    """A short hash of C text for an op's ``c_code_cache_version``: editing the text can never reuse a
    stale compiled module.

    >>> len(c_source_hash("int x;"))
    12
    """
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def normalize_pair(value, name: str, minimum: int) -> tuple[int, int]:
    """Return ``value`` as a pair of Python ints, each ``>= minimum``.

    ``value`` may be an int or a length-2 sequence of ints; anything else
    raises :class:`ValueError` that quotes it.
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        pair = (int(value), int(value))
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}") from None
        if len(items) != 2 or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items
        ):
            raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
        pair = (int(items[0]), int(items[1]))
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum} in both dimensions, got {value!r}")
    return pair


def out_length(size, kernel, stride: int, pad: int):
    """Output length of a window op (floor mode, like torch).

    Works for Python ints and for symbolic pytensor scalars alike.
    """
    return (size + 2 * pad - kernel) // stride + 1


def static_out_length(size, kernel, stride: int, pad: int) -> int | None:
    """:func:`out_length` when both sizes are statically known, else None."""
    if size is None or kernel is None:
        return None
    return out_length(size, kernel, stride, pad)


def as_float_tensor4(value, op_name: str, arg_name: str):
    """``value`` as a 4-D float32/float64 tensor variable, or ValueError."""
    var = pt.as_tensor_variable(value)
    if var.ndim != 4:
        raise ValueError(
            f"{op_name}: {arg_name} must be a 4-D tensor, got ndim={var.ndim} "
            f"(type {var.type})"
        )
    if var.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{op_name}: {arg_name} must have dtype float32 or float64, got {var.dtype!r}"
        )
    return var


def check_same_dtype(op_name: str, **variables) -> str:
    """Return the common dtype of ``variables`` or raise ValueError naming each."""
    dtypes = {name: var.dtype for name, var in variables.items()}
    if len(set(dtypes.values())) != 1:
        listing = ", ".join(f"{name}={dtype!r}" for name, dtype in dtypes.items())
        raise ValueError(f"{op_name}: inputs must share one dtype (no implicit upcast), got {listing}")
    return next(iter(dtypes.values()))


def check_window_fits(op_name: str, sizes, kernel, pad) -> None:
    """Raise ValueError when a (kh, kw) window does not fit the padded (H, W) input.

    Unknown (None) sizes are skipped, so this works on static and runtime shapes.
    """
    for axis, size, k, p in zip(("height", "width"), sizes, kernel, pad):
        if size is None or k is None:
            continue
        if size + 2 * p < k:
            raise ValueError(
                f"{op_name}: window {k} is larger than the padded input {axis} "
                f"{size} + 2*{p} = {size + 2 * p}"
            )


def tensor4_type(dtype: str, shape) -> TensorType:
    """A 4-D TensorType with the given (possibly partly None) static shape."""
    return TensorType(dtype, shape=tuple(shape))


class BlasCFlagsMixin:
    """Compile/link flags that let an Op's C code call the configured BLAS.

    Mirrors what pytensor's own BLAS ops do; ``has_blas()`` is False when
    ``blas__ldflags`` is empty, in which case ``c_code`` should raise
    NotImplementedError so pytensor falls back to ``perform``.
    """

    @staticmethod
    def has_blas() -> bool:
        return len(ldflags()) > 0

    def c_libraries(self, **kwargs):
        return ldflags()

    def c_compile_args(self, **kwargs):
        return ldflags(libs=False, flags=True)

    def c_lib_dirs(self, **kwargs):
        return ldflags(libs=False, libs_dir=True)

    def c_header_dirs(self, **kwargs):
        return ldflags(libs=False, include_dir=True)
