"""Safe file I/O: loading without unpickling arbitrary objects, and writing files readers never see half-written.

hickle stores Python *types* (and unknown objects) as pickles, so a crafted
``.hkl`` file can run code on ``hickle.load``. :func:`load_hickle` runs hickle
with a restricted unpickler that resolves only plain containers, numbers,
strings and numpy arrays/scalars; anything else (``os.system``, a user class,
...) is refused before it is resolved, with :class:`UnsafeFileError` naming
the file and the global.

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
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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


def load_hickle(path: StrPath) -> object:
    """``hickle.load`` without arbitrary unpickling; ConfigError for a missing, corrupt or unsafe file."""
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
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


def atomic_write(path: StrPath, write: Callable[[Path], object]) -> Path:
    """Replace ``path`` by what ``write(tmp)`` writes to a temporary path beside it, then a rename.

    Readers see the old file or the new one, never a partial one. The temporary
    name is hidden, unique to this process and keeps ``path``'s suffix (writers
    such as ``numpy.savez`` add one otherwise); it is removed if ``write`` fails.

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
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: StrPath, text: str) -> Path:
    """Replace ``path``'s contents by ``text`` (see :func:`atomic_write`).

    Example
    -------
    >>> import tempfile
    >>> path = atomic_write_text(Path(tempfile.mkdtemp()) / "latest", "ckpt-epoch-0003.hkl")
    >>> path.read_text()
    'ckpt-epoch-0003.hkl'
    """
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def save_hickle_atomically(obj: object, path: StrPath) -> Path:
    """Write ``obj`` with hickle to ``path`` (never half-written: :func:`atomic_write`)."""
    import hickle  # noqa: PLC0415 - hickle loads h5py: only when a file is read

    return atomic_write(path, lambda tmp: hickle.dump(obj, str(tmp), mode="w"))
