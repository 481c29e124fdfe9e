"""PyTensor configuration for theanompi processes.

Call :func:`configure_pytensor` *before* ``import pytensor`` in a process. It

* links a real BLAS (the ``scipy-openblas32`` wheel) into pytensor's C code by
  renaming the wheel's prefixed symbols (``scipy_sgemm_`` ...) with ``-D`` macros,
* selects the C backend (``mode=FAST_RUN``, ``linker=cvm``) instead of pytensor 3's
  NUMBA default, which compiles for minutes in every process,
* points every process at one compile cache (pytensor guards it with a file lock,
  so concurrent ranks share it safely).

The settings travel through a pytensorrc file named by ``PYTENSORRC``; values a
user sets in ``PYTENSOR_FLAGS`` still win. A pytensorrc whose text is not what it
should be (cut short, edited) is rewritten, with a warning.

The caches (this compile cache, :mod:`theanompi.backend.function_cache`, the
remembered -march flags) hold code: :func:`cache_root` uses ``THEANOMPI_CACHE_DIR``
(default ``~/.cache/theanompi``, created 0700) only if it and everything under it
is the user's and writable by nobody else (:mod:`theanompi.core.private_paths`),
and it can be written. Otherwise one warning names the path and why, and the
process (and the ranks it starts) compile with the caches off, in a private
directory of the system's temporary directory.

``import theanompi`` runs :func:`ensure_pytensor_configured`, so the import order
does not matter: when pytensor was imported first (with its own defaults), the
settings the user did not choose are applied to the live ``pytensor.config``.
It also picks OpenBLAS's kernels (:func:`choose_openblas_coretype`) and lets idle OpenMP and OpenBLAS
threads sleep instead of spinning (:func:`choose_idle_thread_waiting`).

Example
-------
>>> from theanompi.backend.pytensor_config import configure_pytensor
>>> rc_path = configure_pytensor()      # doctest: +SKIP
>>> import pytensor                      # doctest: +SKIP
>>> pytensor.config.linker              # doctest: +SKIP
'cvm'
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import sys
import tempfile
from pathlib import Path

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import read_bounded
from theanompi.core.private_paths import make_private_dir, untrusted_tree
from theanompi.core.safe_io import atomic_write_text

#: the most a pytensorrc theanompi wrote holds
RC_LIMIT = 64 * 1024

log = logging.getLogger(__name__)

#: BLAS routines pytensor's C code calls; each is mapped onto the wheel's prefixed name.
BLAS_SYMBOLS = (
    "sgemm dgemm sgemv dgemv sger dger sdot ddot saxpy daxpy scopy dcopy "
    "sscal dscal sswap dswap ssymv dsymv ssyrk dsyrk strsm dtrsm"
).split()


def default_cache_dir() -> Path:
    """The cache directory asked for: ``THEANOMPI_CACHE_DIR``, else ``~/.cache/theanompi`` (see :func:`cache_root`)."""
    env = os.environ.get("THEANOMPI_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "theanompi"


#: the environment variable that turns the function cache off (theanompi.backend.function_cache)
FUNCTION_CACHE_ENV = "THEANOMPI_FUNCTION_CACHE"
#: roots already checked in this process: asked-for path -> the root in use
_CHECKED_ROOTS: dict[str, Path] = {}


def cache_problem(root: Path) -> str | None:
    """Why ``root`` cannot hold this user's caches (created 0700 if missing), or None.

    >>> import tempfile
    >>> cache_problem(Path(tempfile.mkdtemp()) / "cache") is None
    True
    >>> cache_problem(Path("/proc/no/cache"))                    # doctest: +ELLIPSIS
    '/proc/no/cache cannot be created: ...'
    """
    try:
        make_private_dir(root)
    except OSError as err:
        return f"{root} cannot be created: {err.strerror or err}"
    problem = untrusted_tree(root)
    if problem is None and not os.access(root, os.W_OK | os.X_OK):
        problem = f"{root} is not writable" + (" (read-only file system)" if _read_only_fs(root) else "")
    return problem


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def fallback_cache_dir() -> Path:
    """This user's private directory for compiling with the caches off: ``<tmp>/theanompi-cache-UID``, or a fresh
    one when that is not trustworthy (someone else made it)."""
    shared = Path(tempfile.gettempdir()) / f"theanompi-cache-{os.geteuid()}"
    if cache_problem(shared) is None:
        return shared
    return Path(tempfile.mkdtemp(prefix="theanompi-cache-"))


def cache_root() -> Path:
    """The cache directory this process uses: :func:`default_cache_dir` when :func:`cache_problem` finds nothing
    wrong with it; else, after one warning naming the path and why, :func:`fallback_cache_dir` with the function
    cache turned off -- set in the environment, so that the ranks this process starts do the same."""
    asked = default_cache_dir()
    known = _CHECKED_ROOTS.get(str(asked))
    if known is not None:
        return known
    problem = cache_problem(asked)
    root = asked
    if problem is not None:
        root = fallback_cache_dir()
        os.environ["THEANOMPI_CACHE_DIR"] = str(root)
        os.environ[FUNCTION_CACHE_ENV] = "off"
        log.warning("theanompi: the cache %s is not used: %s; compiling with the caches off (in %s)",
                    asked, problem, root)
        _CHECKED_ROOTS[str(root)] = root
    _CHECKED_ROOTS[str(asked)] = root
    return root


def blas_ldflags() -> str:
    """Linker and macro flags that make pytensor's C code call scipy-openblas32.

    Returns an empty string (pytensor then falls back to NumPy's C-API BLAS,
    correct but slow) when the wheel is not installed.
    """
    try:
        import scipy_openblas32  # noqa: PLC0415 - optional: without the wheel, NumPy's BLAS
    except ImportError:
        log.warning("scipy-openblas32 is not installed; pytensor will use slow NumPy BLAS")
        return ""
    libdir = scipy_openblas32.get_lib_dir()
    lib = scipy_openblas32.get_library()
    renames = " ".join(f"-D{sym}_=scipy_{sym}_" for sym in BLAS_SYMBOLS)
    return f"-L{libdir} -l{lib} -Wl,-rpath,{libdir} {renames}"


def pytensorrc_text(cache_dir: Path, floatx: str | None = "float32") -> str:
    """The pytensorrc contents :func:`configure_pytensor` installs (``floatx`` None: pytensor's own default)."""
    return (
        "[global]\n"
        "mode = FAST_RUN\n"
        "linker = cvm\n"
        + (f"floatX = {floatx}\n" if floatx else "")
        + f"base_compiledir = {cache_dir / 'pytensor'}\n"
        "[blas]\n"
        f"ldflags = {blas_ldflags()}\n"
    )


#: OpenBLAS kernel family for CPUs whose AVX-512 the OS really enables (ours are faster than the Haswell
#: kernels OpenBLAS falls back to on some AVX-512 CPUs, e.g. AMD Zen 4).
AVX512_CORETYPE = "SkylakeX"
AVX512_FEATURES = ("AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL")


#: Who chose this process's OPENBLAS_CORETYPE (set by :func:`ensure_pytensor_configured`).
_CORETYPE_CHOICE: dict[str, str] = {}

#: How idle threads of the two pools a CPU step uses wait for work: asleep, not spinning. Our ops share
#: images out over OpenMP threads while GEMMs run in OpenBLAS's own threads; an idle thread of one pool
#: that spins (libgomp's default spin, OpenBLAS's ~2**28-cycle busy wait after every call) takes a core
#: from the other pool's working thread. Measured on a 2-core VM (benchmarks/cnn_step_vs_torch.py):
#: both settings together cut the CPU time of a CNN step by ~45 %.
IDLE_THREAD_SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}


def usable_cpu_features() -> dict[str, bool]:
    """NumPy's view of the CPU: instruction sets the CPU reports *and* the OS enables."""
    # numpy's own OpenBLAS reads the thread settings chosen here as it loads: numpy is imported only when needed
    from numpy._core._multiarray_umath import __cpu_features__  # noqa: PLC0415 - numpy after BLAS settings

    return dict(__cpu_features__)


def choose_openblas_coretype(environ=os.environ, features: dict[str, bool] | None = None) -> tuple[str | None, str]:
    """Set ``OPENBLAS_CORETYPE`` for this CPU unless the user set it; return (value, who chose it).

    Only AVX-512 CPUs get a forced choice (:data:`AVX512_CORETYPE`); elsewhere
    OpenBLAS's own detection stands (value None). AVX-512 kernels on a machine
    whose OS hides AVX-512 would die with SIGILL, hence NumPy's OS-aware feature
    check rather than ``/proc/cpuinfo``. Takes effect only if OpenBLAS is not
    loaded yet (it reads the variable once, when loaded).

    >>> env = {}
    >>> choose_openblas_coretype(env, features={name: True for name in AVX512_FEATURES})
    ('SkylakeX', 'theanompi')
    >>> env
    {'OPENBLAS_CORETYPE': 'SkylakeX'}
    >>> choose_openblas_coretype({"OPENBLAS_CORETYPE": "Haswell"}, features={})
    ('Haswell', 'user')
    >>> choose_openblas_coretype({}, features={"AVX512F": False})
    (None, 'openblas')
    """
    if environ.get("OPENBLAS_CORETYPE"):
        return environ["OPENBLAS_CORETYPE"], "user"
    features = usable_cpu_features() if features is None else features
    if all(features.get(name, False) for name in AVX512_FEATURES):
        environ["OPENBLAS_CORETYPE"] = AVX512_CORETYPE
        return AVX512_CORETYPE, "theanompi"
    return None, "openblas"


def choose_idle_thread_waiting(environ=os.environ) -> dict[str, str]:
    """Let idle OpenMP and OpenBLAS threads sleep (:data:`IDLE_THREAD_SETTINGS`); return what was set.

    A variable the user defined, even empty, is left alone. Takes effect only for a
    library not loaded yet (libgomp and OpenBLAS read them once, when loaded).

    >>> env = {"OMP_WAIT_POLICY": "ACTIVE"}
    >>> choose_idle_thread_waiting(env)
    {'OPENBLAS_THREAD_TIMEOUT': '4'}
    >>> env["OMP_WAIT_POLICY"]
    'ACTIVE'
    """
    chosen = {name: value for name, value in IDLE_THREAD_SETTINGS.items() if name not in environ}
    environ.update(chosen)
    return chosen


def openblas_corename() -> str | None:
    """The kernel family the BLAS pytensor links against runs with (loads it), or None without the wheel."""
    try:
        import scipy_openblas32  # noqa: PLC0415 - optional: without the wheel, NumPy's BLAS
    except ImportError:
        return None
    libdir = Path(scipy_openblas32.get_lib_dir())
    library = ctypes.CDLL(str(libdir / f"lib{scipy_openblas32.get_library()}.so"))
    corename = library.scipy_openblas_get_corename
    corename.restype = ctypes.c_char_p
    return corename().decode()


def blas_report() -> dict[str, str | None]:
    """What BLAS this process computes with: ``OPENBLAS_CORETYPE``, who chose it, the kernels OpenBLAS runs.

    >>> sorted(blas_report())
    ['chosen_by', 'corename', 'coretype', 'omp_wait_policy', 'openblas_thread_timeout']
    """
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    chosen_by = _CORETYPE_CHOICE.get("chosen_by") or ("user" if coretype else "openblas")
    return {"coretype": coretype, "chosen_by": chosen_by, "corename": openblas_corename(),
            **{name.lower(): os.environ.get(name) for name in IDLE_THREAD_SETTINGS}}


def configure_pytensor(cache_dir: Path | None = None, floatx: str | None = "float32") -> Path:
    """Write (once) and select the pytensorrc for this process; return its path.

    Must run before pytensor is imported; raises RuntimeError otherwise, because
    pytensor reads its configuration only at import.
    """
    if "pytensor" in sys.modules:
        raise RuntimeError("configure_pytensor() must be called before 'import pytensor'")
    rc_path = write_pytensorrc(cache_dir, floatx)
    os.environ["PYTENSORRC"] = str(rc_path)
    return rc_path


def live_settings(floatx: str = "float32") -> dict[str, str]:
    """The settings of our pytensorrc that :func:`ensure_pytensor_configured` applies to a live pytensor."""
    return {"mode": "FAST_RUN", "linker": "cvm", "floatX": floatx, "blas__ldflags": blas_ldflags()}


def _user_set(config, name: str) -> bool:
    """Whether PYTENSOR_FLAGS or a pytensorrc names ``name`` (without evaluating its default)."""
    param = config._config_var_dict[name]
    if hasattr(param, "val"):
        return not param.is_default  # pytensor drops a flag from its table once applied
    try:
        config.fetch_val_for_key(name)
    except KeyError:
        return False
    return True


def ensure_pytensor_configured(cache_dir: Path | None = None, floatx: str = "float32") -> list[str]:
    """Give this process theanompi's pytensor configuration, whatever the import order.

    Before ``import pytensor`` this is :func:`configure_pytensor`. After it, each
    setting of :func:`live_settings` that the user did not set (through
    ``PYTENSOR_FLAGS`` or a pytensorrc) is changed on the live
    ``pytensor.config`` (all four may change at run time), and the compile
    directory too while pytensor has not used it yet. Returns the names of the
    settings changed on a live pytensor (empty before import). Raises
    RuntimeError with the fix when a setting cannot be applied.
    """
    value, chosen_by = choose_openblas_coretype()
    _CORETYPE_CHOICE["chosen_by"] = chosen_by
    choose_idle_thread_waiting()
    if value is not None:
        log.info("OPENBLAS_CORETYPE=%s (chosen by %s)", value, chosen_by)
    if "pytensor" not in sys.modules:
        _FLOATX_DEFAULT.update(rc=str(configure_pytensor(cache_dir, floatx)), cache_dir=cache_dir)
        return []
    # pytensor may have read a pytensorrc of ours named by an environment inherited from a theanompi process
    inherited = _is_theanompi_rc(os.environ.get("PYTENSORRC"), cache_dir)
    os.environ["PYTENSORRC"] = str(write_pytensorrc(cache_dir, floatx))  # for child processes
    _FLOATX_DEFAULT.update(rc=os.environ["PYTENSORRC"], cache_dir=cache_dir, pytensor_first=True,
                           inherited_rc=inherited)
    from pytensor import config  # noqa: PLC0415 - no pytensor at the launcher's import

    changed = []
    for name, wanted in live_settings(floatx).items():
        already_ours = hasattr(config._config_var_dict[name], "val") and getattr(config, name) == wanted
        if _user_set(config, name) or already_ours:
            continue  # the user's own choice, or already ours
        if name == "floatX":
            _FLOATX_DEFAULT["live_previous"] = getattr(config, name)
        try:
            setattr(config, name, wanted)
        except Exception as err:  # pytensor raises a bare Exception for frozen settings
            raise RuntimeError(
                f"pytensor was imported before theanompi and its {name} cannot be changed any more ({err}); "
                "import theanompi before pytensor"
            ) from None
        changed.append(name)
    compiledir = config._config_var_dict["compiledir"]
    if not hasattr(compiledir, "val") and not (_user_set(config, "compiledir") or _user_set(config, "base_compiledir")):
        base = Path(cache_dir or cache_root()) / "pytensor"
        config.compiledir = base / Path(compiledir.default()).name  # same sub-directory name, our shared root
        changed.append("compiledir")
    if changed:
        log.info("pytensor was imported before theanompi; set %s on the live pytensor.config", ", ".join(changed))
    return changed


#: How theanompi gave this process its float32 floatX: the pytensorrc it installed (``rc``) and, when pytensor
#: was imported before theanompi, the value it replaced on the live config (``live_previous``).
_FLOATX_DEFAULT: dict = {}

#: Modules whose import means the float32 default may be in use (they create variables in floatX).
FLOATX_USERS = ("theanompi.models.base", "theanompi.nn", "theanompi.models.layers2", "theanompi.lasagne")


def leave_floatx_to_pytensor() -> str | None:
    """Undo ``import theanompi``'s float32 default of ``floatX`` (Multiverso's API scripts assume Theano's own,
    float64): ``floatX`` becomes what it was without theanompi, unless the user set it (``PYTENSOR_FLAGS`` or
    their own pytensorrc: then nothing was changed) or a theanompi layer or model module was imported already
    (it may hold float32 variables). Returns the floatX this process now gets ("float64"), or None when it left
    it as it was.

    Example
    -------
    >>> leave_floatx_to_pytensor() in (None, "float64")        # doctest: +SKIP
    True
    """
    if not _FLOATX_DEFAULT or any(name in sys.modules for name in FLOATX_USERS):
        return None
    if "pytensor" not in sys.modules:
        if os.environ.get("PYTENSORRC") != _FLOATX_DEFAULT["rc"]:
            return None  # another pytensorrc was chosen since
        rc = write_pytensorrc(_FLOATX_DEFAULT["cache_dir"], floatx=None)
        os.environ["PYTENSORRC"] = _FLOATX_DEFAULT["rc"] = str(rc)
        _FLOATX_DEFAULT.clear()
        return "float64"
    from pytensor import config  # noqa: PLC0415 - only when the script imported pytensor already

    previous = _FLOATX_DEFAULT.get("live_previous")
    if _FLOATX_DEFAULT.get("pytensor_first"):
        if previous is None and not (_FLOATX_DEFAULT.get("inherited_rc") and not _user_set_by_flags("floatX")):
            return None  # pytensor came first with the user's floatX: theanompi left it alone
    elif _user_set_by_flags("floatX") or os.environ.get("PYTENSORRC") != _FLOATX_DEFAULT["rc"]:
        return None  # pytensor read the user's floatX, or another pytensorrc
    config.floatX = previous or config._config_var_dict["floatX"].default
    os.environ["PYTENSORRC"] = str(write_pytensorrc(_FLOATX_DEFAULT["cache_dir"], floatx=None))
    _FLOATX_DEFAULT.clear()
    return str(config.floatX)


def _is_theanompi_rc(path: str | None, cache_dir: Path | None) -> bool:
    """Whether ``path`` is a pytensorrc that :func:`write_pytensorrc` wrote (in the cache directory)."""
    if not path:
        return False
    rc = Path(path)
    return rc.name.startswith("pytensorrc-") and rc.parent == Path(cache_dir or default_cache_dir())


def _user_set_by_flags(name: str) -> bool:
    """Whether ``PYTENSOR_FLAGS`` names ``name`` (our pytensorrc names floatX too, so the rc does not count)."""
    flags = os.environ.get("PYTENSOR_FLAGS", "")
    return any(item.split("=", 1)[0].strip() == name for item in flags.split(",") if "=" in item)


def write_pytensorrc(cache_dir: Path | None = None, floatx: str | None = "float32") -> Path:
    """Write the pytensorrc of :func:`pytensorrc_text` into the cache directory (:func:`cache_root` by default)
    unless it is there already, whole; return its path. A file of that name with any other text (cut short,
    edited) is rewritten, with a warning."""
    cache_dir = Path(cache_dir) if cache_dir else cache_root()
    make_private_dir(cache_dir)
    text = pytensorrc_text(cache_dir, floatx)
    rc_path = cache_dir / f"pytensorrc-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    try:
        found: str | None = read_bounded(rc_path, RC_LIMIT, "pytensorrc", root=cache_dir).decode(errors="replace")
    except FileNotFoundError:
        found = None
    except (OSError, ConfigError) as err:  # e.g. a directory, a link or a FIFO in its place
        found = f"<unreadable: {getattr(err, 'strerror', None) or err}>"
    if found != text:
        if found is not None:
            log.warning("theanompi: %s was damaged (its text is not the settings it holds); rewritten", rc_path)
        atomic_write_text(rc_path, text, mode=0o600)  # concurrent ranks write the same text
    return rc_path
