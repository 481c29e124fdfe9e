"""PyTensor configuration for theanompi processes.

Call :func:`configure_pytensor` *before* ``import pytensor`` in a process. It

* links a real BLAS (the ``scipy-openblas32`` wheel) into pytensor's C code by
  renaming the wheel's prefixed symbols (``scipy_sgemm_`` ...) with ``-D`` macros,
* selects the C backend (``mode=FAST_RUN``, ``linker=cvm``) instead of pytensor 3's
  NUMBA default, which compiles for minutes in every process,
* points every process at one compile cache (pytensor guards it with a file lock,
  so concurrent ranks share it safely).

The settings travel through a pytensorrc file named by ``PYTENSORRC``; values a
user sets in ``PYTENSOR_FLAGS`` still win.

Example
-------
>>> from theanompi.backend import configure_pytensor
>>> rc_path = configure_pytensor()      # doctest: +SKIP
>>> import pytensor                      # doctest: +SKIP
>>> pytensor.config.linker              # doctest: +SKIP
'cvm'
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

#: BLAS routines pytensor's C code calls; each is mapped onto the wheel's prefixed name.
BLAS_SYMBOLS = (
    "sgemm dgemm sgemv dgemv sger dger sdot ddot saxpy daxpy scopy dcopy "
    "sscal dscal sswap dswap ssymv dsymv ssyrk dsyrk strsm dtrsm"
).split()


def default_cache_dir() -> Path:
    """The compile cache shared by all ranks and runs (``THEANOMPI_CACHE_DIR`` overrides)."""
    env = os.environ.get("THEANOMPI_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "theanompi"


def blas_ldflags() -> str:
    """Linker and macro flags that make pytensor's C code call scipy-openblas32.

    Returns an empty string (pytensor then falls back to NumPy's C-API BLAS,
    correct but slow) when the wheel is not installed.
    """
    try:
        import scipy_openblas32
    except ImportError:
        log.warning("scipy-openblas32 is not installed; pytensor will use slow NumPy BLAS")
        return ""
    libdir = scipy_openblas32.get_lib_dir()
    lib = scipy_openblas32.get_library()
    renames = " ".join(f"-D{sym}_=scipy_{sym}_" for sym in BLAS_SYMBOLS)
    return f"-L{libdir} -l{lib} -Wl,-rpath,{libdir} {renames}"


def pytensorrc_text(cache_dir: Path, floatx: str = "float32") -> str:
    """The pytensorrc contents :func:`configure_pytensor` installs."""
    return (
        "[global]\n"
        "mode = FAST_RUN\n"
        "linker = cvm\n"
        f"floatX = {floatx}\n"
        f"base_compiledir = {cache_dir / 'pytensor'}\n"
        "[blas]\n"
        f"ldflags = {blas_ldflags()}\n"
    )


def configure_pytensor(cache_dir: Path | None = None, floatx: str = "float32") -> Path:
    """Write (once) and select the pytensorrc for this process; return its path.

    Must run before pytensor is imported; raises RuntimeError otherwise, because
    pytensor reads its configuration only at import.
    """
    if "pytensor" in sys.modules:
        raise RuntimeError("configure_pytensor() must be called before 'import pytensor'")
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    text = pytensorrc_text(cache_dir, floatx)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    rc_path = cache_dir / f"pytensorrc-{digest}"
    if not rc_path.exists():
        # Concurrent ranks write identical content; write-then-rename keeps it atomic.
        tmp = rc_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, rc_path)
    os.environ["PYTENSORRC"] = str(rc_path)
    return rc_path
