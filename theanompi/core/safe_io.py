"""Safe file I/O: loading without unpickling arbitrary objects, and writing files readers never see half-written.

hickle stores Python *types* (and unknown objects) as pickles, so a crafted
``.hkl`` file can run code on ``hickle.load``. :func:`load_hickle` reads only
hickle 4/5 files (hickle reads v3 files with ``dill``), and first reads every
pickle hickle would unpickle without unpickling it
(:mod:`theanompi.core.hickle_pickles`): one naming a global beyond plain
containers, numbers, strings and numpy arrays/scalars (``os.system``, a user
class, ...) is refused with :class:`UnsafeFileError` naming the file and the
global, before hickle reads the file. hickle then runs with a restricted
unpickler that resolves only those globals, too.

Example
-------
>>> load_hickle("checkpoint.hkl")["epoch"]             # doctest: +SKIP
3
>>> load_hickle("evil.hkl")                             # doctest: +SKIP
Traceback (most recent call last):
theanompi.core.safe_io.UnsafeFileError: refusing to unpickle 'evil.hkl': it references the global 'builtins.print' ...

:func:`atomic_write` is the one way this package replaces a file that another
process (a rank, the launcher, a person) may read at the same moment: it writes
a temporary file beside the target, then renames it over the target.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from theanompi.core.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import StrPath

_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray", "int", "float",
             "complex", "bool", "NoneType", "range", "slice"}
_NUMPY_TYPES = {"ndarray", "dtype", "bool_", "float16", "float32", "float64", "longdouble", "complex64",
                "complex128", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "str_", "bytes_"}
SAFE_GLOBALS = frozenset(
    {("builtins", n) for n in _BUILTINS}
    | {("numpy", n) for n in _NUMPY_TYPES}
    | {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")}
    | {("numpy.dtypes", n) for n in ("Float32DType", "Float64DType", "Int32DType", "Int64DType", "UInt8DType",
                                     "Float16DType", "BoolDType", "Int8DType", "Int16DType", "UInt16DType",
                                     "UInt32DType", "UInt64DType", "StrDType", "BytesDType")}
)


class UnsafeFileError(ConfigError):
    """A file would need to unpickle a global outside the allowed set; nothing was executed."""


UnsafePickleError = UnsafeFileError  # the name the data loaders use


def _type_of_none(obj: object = None, *rest: object) -> type[None]:
    if obj is not None or rest:
        raise UnsafeFileError("refusing to unpickle a call of 'builtins.type' other than type(None)")
    return type(None)


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only an allow-list of globals and refuses every other one.

    Without a global a pickle can build only dicts, lists, tuples, strings, bytes
    and numbers, so a refused global means no code from the file runs.

    Parameters
    ----------
    file : binary file
        The pickle stream.
    source : str
        Name for error messages (usually the path).
    allowed : set of (module, name), optional
        The globals that may be resolved (default :data:`SAFE_GLOBALS`).
    encoding : str
        As for :class:`pickle.Unpickler` (``'bytes'`` for Python 2 pickles such as CIFAR-10's).

    Example
    -------
    >>> import io, os
    >>> class Evil:
    ...     def __reduce__(self):
    ...         return (os.system, ("echo pwned",))
    >>> try:
    ...     RestrictedUnpickler(io.BytesIO(pickle.dumps(Evil())), source="evil.pkl").load()
    ... except UnsafeFileError as e:
    ...     print(str(e)[:66])
    refusing to unpickle 'evil.pkl': it references the global 'posix.s
    """

    def __init__(self, file: IO[bytes], source: str = "<pickle>", allowed: Iterable[tuple[str, str]] | None = None,
                 encoding: str = "ASCII") -> None:
        super().__init__(file, encoding=encoding)
        self.source = source
        self.allowed = SAFE_GLOBALS if allowed is None else frozenset(allowed)

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "type") and ("builtins", "NoneType") in self.allowed:
            return _type_of_none  # pickle spells NoneType as type(None)
        if (module, name) in self.allowed:
            return super().find_class(module, name)
        raise UnsafeFileError(f"refusing to unpickle {self.source!r}: it references the global '{module}.{name}' "
                              "(only containers, numbers, strings and numpy arrays are allowed)")

    def persistent_load(self, pid: object) -> NoReturn:
        raise UnsafeFileError(f"refusing to unpickle {self.source!r}: it uses a persistent id ({pid!r})")


def restricted_loads(data: bytes, source: str = "<pickle>", allowed: Iterable[tuple[str, str]] | None = None) -> Any:
    """``pickle.loads`` that resolves only ``allowed`` globals (default :data:`SAFE_GLOBALS`)."""
    return RestrictedUnpickler(io.BytesIO(bytes(data)), source=source, allowed=allowed).load()


_HICKLE_LOCK = threading.Lock()  # hickle's module-level pickle is swapped while one load runs


@contextmanager
def _hickle_uses_restricted_pickle(source: str) -> Iterator[None]:
    import hickle.hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read
    import hickle.lookup  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    shim = types.SimpleNamespace(**{k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
    shim.loads = lambda data, **kw: restricted_loads(data, source)
    with _HICKLE_LOCK:
        saved = hickle.hickle.pickle, hickle.lookup.pickle
        hickle.hickle.pickle = hickle.lookup.pickle = shim
        try:
            yield
        finally:
            hickle.hickle.pickle, hickle.lookup.pickle = saved


def _allowed_global(module: str, name: str) -> bool:
    if (module, name) == ("builtins", "type"):  # type(None): see RestrictedUnpickler.find_class
        return ("builtins", "NoneType") in SAFE_GLOBALS
    return (module, name) in SAFE_GLOBALS


def check_hickle_pickles(path: Path) -> None:
    """UnsafeFileError unless ``path`` is a hickle 4/5 file whose every pickle names only allowed globals
    (nothing is unpickled); ConfigError for a file h5py cannot open."""
    import h5py  # noqa: PLC0415 - h5py takes ~0.15 s to import: only when a file is read

    from theanompi.core.hickle_pickles import (  # noqa: PLC0415 - imports h5py: only when a file is read
        UncheckablePickle,
        hickle_pickles,
        pickle_globals,
    )

    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ConfigError(f"{path}: not a readable hickle file ({err})") from None
    with f:
        if "HICKLE_VERSION" not in f.attrs:
            if "VERSION" in f.attrs or "CLASS" in f.attrs:
                raise UnsafeFileError(f"refusing to load {str(path)!r}: it is a hickle v3 file, which hickle reads "
                                      "with dill, unpickling anything it holds; only hickle 4/5 files are read")
            raise ConfigError(f"{path}: not a readable hickle file (no HICKLE_VERSION attribute)")
        try:
            for where, raw in hickle_pickles(f):
                for module, name in pickle_globals(raw):
                    if not _allowed_global(module, name):
                        raise UnsafeFileError(
                            f"refusing to unpickle {str(path)!r}: it references the global '{module}.{name}' in "
                            f"{where} (only containers, numbers, strings and numpy arrays are allowed)")
        except UncheckablePickle as why:
            raise UnsafeFileError(f"refusing to load {str(path)!r}: {why}") from None
        except ConfigError:
            raise
        except (KeyError, ValueError, TypeError, OSError) as err:  # h5py on a malformed layout
            raise ConfigError(f"{path}: not a readable hickle file ({type(err).__name__}: {err})") from None


def load_hickle(path: StrPath) -> object:
    """``hickle.load`` without arbitrary unpickling (:func:`check_hickle_pickles` first); ConfigError for a
    missing, corrupt or unsafe file."""
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    check_hickle_pickles(path)
    try:
        with _hickle_uses_restricted_pickle(str(path)):
            return hickle.load(str(path))
    except Exception as err:  # hickle wraps everything in ValueError; find our refusal in the chain
        cause: BaseException | None = err
        while cause is not None:
            if isinstance(cause, UnsafeFileError):
                raise UnsafeFileError(str(cause)) from None
            wrapped = cause.args[1] if len(cause.args) > 1 and isinstance(cause.args[1], BaseException) else None
            cause = cause.__cause__ or wrapped
        raise ConfigError(f"{path}: not a readable hickle file ({type(err).__name__}: {str(err)[:200]})") from None


def atomic_write(path: StrPath, write: Callable[[Path], object], mode: int | None = None) -> Path:
    """Replace ``path`` by what ``write(tmp)`` writes to a temporary path beside it, then a rename.

    Readers see the old file or the new one, never a partial one. The temporary
    name is hidden, unique to this process and keeps ``path``'s suffix (writers
    such as ``numpy.savez`` add one otherwise); it is removed if ``write`` fails
    (when it can be: the error that stopped the write is the one raised). ``mode``,
    if given, is the new file's permission bits whatever the umask (e.g. 0o600).

    Example
    -------
    >>> import tempfile, numpy as np
    >>> d = Path(tempfile.mkdtemp())
    >>> atomic_write(d / "a.npz", lambda tmp: np.savez(tmp, x=np.arange(3))).name
    'a.npz'
    >>> sorted(p.name for p in d.iterdir())
    ['a.npz']
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):  # e.g. a read-only file system: the write's own error says it
            tmp.unlink(missing_ok=True)
        raise
    return path


def temporary_path(path: StrPath, pid: int | None = None) -> Path:
    """The temporary file :func:`atomic_write` writes ``path`` to in process ``pid`` (default: this one).

    Example
    -------
    >>> temporary_path("ckpt/ckpt-epoch-0003.hkl", pid=42).name
    '.ckpt-epoch-0003.tmp42.hkl'
    """
    path = Path(path)
    return path.with_name(f".{path.stem}.tmp{os.getpid() if pid is None else pid}{path.suffix}")


def atomic_write_text(path: StrPath, text: str, mode: int | None = None) -> Path:
    """Replace ``path``'s contents by ``text`` (see :func:`atomic_write`).

    Example
    -------
    >>> import tempfile
    >>> path = atomic_write_text(Path(tempfile.mkdtemp()) / "latest", "ckpt-epoch-0003.hkl")
    >>> path.read_text()
    'ckpt-epoch-0003.hkl'
    """
    return atomic_write(path, lambda tmp: tmp.write_text(text), mode=mode)


def os_error_code(err: BaseException) -> int | None:
    """The errno behind an error: an OSError's in its chain, or the ``errno = N`` HDF5 writes into its messages
    (h5py reports a full disk as a RuntimeError); None if there is none.

    Example
    -------
    >>> os_error_code(RuntimeError("Unable to flush file (file write failed: errno = 28, ...)"))
    28
    >>> os_error_code(ValueError("no errno here")) is None
    True
    """
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno:
            return cause.errno
        said = re.search(r"\berrno = (\d+)", str(cause))
        if said and int(said.group(1)):
            return int(said.group(1))
        cause = cause.__cause__ or cause.__context__
    return None


def save_hickle_atomically(obj: object, path: StrPath) -> Path:
    """Write ``obj`` with hickle to ``path`` (never half-written: :func:`atomic_write`). A write the system
    refused (a full disk: h5py says so inside a RuntimeError) raises OSError with that errno, naming ``path``."""
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    def write(tmp: Path) -> None:
        try:
            hickle.dump(obj, str(tmp), mode="w")
        except Exception as err:
            code = os_error_code(err)
            if code is None:
                raise
            raise OSError(code, os.strerror(code), str(path)) from None

    return atomic_write(path, write)
