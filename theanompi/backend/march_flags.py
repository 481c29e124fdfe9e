"""Remember pytensor's ``-march=native`` flags per machine instead of asking g++ in every process.

Before it builds or even looks up its first C module, pytensor works out which
flags ``-march=native`` stands for: it runs ``g++ -march=native -E -v`` and then
compiles and runs a test program with the answer. That costs ~0.4 s in every
process that compiles (measured on a 2-vCPU AMD EPYC VM), so in every rank of
every session. The answer depends only on the compiler and the CPU, so
:func:`use_remembered_march_flags` keeps it in a small JSON file in the cache
directory, named by a digest of the compiler setting and binary (path, size, mtime), the CPU
(``/proc/cpuinfo``'s model and flags), pytensor's version and the user's
``gcc__cxxflags``; later processes hand it to pytensor (``GCC_compiler.march_flags``)
and skip the detection. The flags are part of pytensor's module keys, so the
remembered flags find the same compiled modules.

Example
-------
>>> flags = use_remembered_march_flags()
>>> flags is None or all(isinstance(f, str) for f in flags)
True
>>> use_remembered_march_flags() == flags          # the second call is a no-op
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytensor
from pytensor.link.c.cmodule import GCC_compiler

from theanompi.backend.pytensor_config import cache_root
from theanompi.core.no_follow import read_bounded
from theanompi.core.safe_io import atomic_write_text

#: the most a flags file holds (a JSON list of compiler flags)
FLAGS_LIMIT = 64 * 1024

log = logging.getLogger(__name__)

#: the flags this process gave pytensor (or found it had), once known
_applied: list[str] | None = None


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name and feature flags (first processor), or '' when unknown.

    >>> cpu_identity(Path("/nonexistent"))
    ''
    """
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    wanted = ("vendor_id", "cpu family", "model", "model name", "flags", "Features", "CPU part")
    lines = []
    for line in text.splitlines():
        if not line.strip():
            break  # end of the first processor's block
        name = line.split(":", 1)[0].strip()
        if name in wanted:
            lines.append(line.strip())
    return "\n".join(lines)


def compiler_identity(cxx: str) -> str:
    """The compiler binary's resolved path, size and mtime, or '' when it is not found."""
    path = shutil.which(cxx) if cxx else None
    if path is None:
        return ""
    real = os.path.realpath(path)
    stat = os.stat(real)
    return f"{real}:{stat.st_size}:{stat.st_mtime_ns}"


def flags_file(cache_dir: Path, cxx: str, cxxflags: str, pytensor_version: str,
               cpu: str | None = None) -> Path | None:
    """The JSON file holding the flags for this compiler, CPU and settings (None without a compiler).

    >>> a = flags_file(Path("/c"), "sh", "", "3.0", cpu="model name: A")
    >>> b = flags_file(Path("/c"), "sh", "", "3.0", cpu="model name: B")
    >>> a.parent == Path("/c") and a != b
    True
    """
    compiler = compiler_identity(cxx)
    if not compiler:
        return None
    cpu = cpu_identity() if cpu is None else cpu
    digest = hashlib.sha256("\0".join([cxx, compiler, cxxflags, pytensor_version, cpu]).encode()).hexdigest()
    return cache_dir / f"march-flags-{digest[:32]}.json"


def _read_flags(path: Path) -> list[str] | None:
    try:  # a ConfigError (a link, a FIFO, a file too large) is a ValueError
        flags = json.loads(read_bounded(path, FLAGS_LIMIT, "march flags", root=path.parent))["flags"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("march flags: ignoring unreadable %s (%s)", path, err)
        return None
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        log.warning("march flags: ignoring %s (not a list of strings)", path)
        return None
    return flags


def use_remembered_march_flags() -> list[str] | None:
    """Give pytensor the remembered flags, or let it detect them once and remember them.

    Returns the flags in use, or None when pytensor has no C++ compiler.
    """
    global _applied
    if _applied is not None:
        return _applied
    config = pytensor.config
    path = flags_file(cache_root(), config.cxx, config.gcc__cxxflags, pytensor.__version__)
    if path is None:
        return None
    if GCC_compiler.march_flags is None:
        remembered = _read_flags(path)
        if remembered is not None:
            GCC_compiler.march_flags = remembered  # type: ignore[assignment]  # pytensor declares it `= None`
            _applied = remembered
            return remembered
        GCC_compiler.compile_args()  # pytensor's own detection (sets GCC_compiler.march_flags)
    flags: list[str] = list(GCC_compiler.march_flags or [])
    if _read_flags(path) != flags:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write_text(path, json.dumps({"flags": flags}), mode=0o600)
        except OSError as err:
            log.warning("march flags: cannot write %s (%s)", path, err)
    _applied = flags
    return flags
