"""Loading files without unpickling arbitrary objects.

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
theanompi.safe_io.UnsafeFileError: evil.hkl: refusing to load the pickled global 'builtins.print' ...
"""

from __future__ import annotations

import io
import pickle
import types
from contextlib import contextmanager
from pathlib import Path

from theanompi.errors import ConfigError

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


def _type_of_none(obj=None, *rest):
    if obj is not None or rest:
        raise UnsafeFileError("refusing to load a pickled call of 'builtins.type' other than type(None)")
    return type(None)


class _RestrictedUnpickler(pickle.Unpickler):
    source = "file"

    def find_class(self, module: str, name: str):
        if (module, name) == ("builtins", "type"):
            return _type_of_none  # pickle spells NoneType as type(None)
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise UnsafeFileError(f"{self.source}: refusing to load the pickled global '{module}.{name}' "
                              "(only containers, numbers, strings and numpy arrays are allowed)")


def restricted_loads(data: bytes, source: str = "file"):
    """``pickle.loads`` that resolves only :data:`SAFE_GLOBALS`."""
    unpickler = _RestrictedUnpickler(io.BytesIO(bytes(data)))
    unpickler.source = source
    return unpickler.load()


@contextmanager
def _hickle_uses_restricted_pickle(source: str):
    import hickle.hickle
    import hickle.lookup

    shim = types.SimpleNamespace(**{k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
    shim.loads = lambda data, **kw: restricted_loads(data, source)
    saved = hickle.hickle.pickle, hickle.lookup.pickle
    hickle.hickle.pickle = hickle.lookup.pickle = shim
    try:
        yield
    finally:
        hickle.hickle.pickle, hickle.lookup.pickle = saved


def load_hickle(path) -> object:
    """``hickle.load`` without arbitrary unpickling; ConfigError for a missing, corrupt or unsafe file."""
    import hickle

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        with _hickle_uses_restricted_pickle(str(path)):
            return hickle.load(str(path))
    except Exception as err:  # hickle wraps everything in ValueError; find our refusal in the chain
        cause = err
        while cause is not None:
            if isinstance(cause, UnsafeFileError):
                raise UnsafeFileError(str(cause)) from None
            cause = cause.__cause__ or (cause.args[1] if len(cause.args) > 1 and isinstance(cause.args[1], BaseException) else None)
        raise ConfigError(f"{path}: not a readable hickle file ({type(err).__name__}: {str(err)[:200]})") from None


def save_hickle_atomically(obj, path) -> Path:
    """Write ``obj`` with hickle to ``path`` via a temporary file and a rename (never half-written)."""
    import hickle

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    hickle.dump(obj, str(tmp), mode="w")
    tmp.replace(path)
    return path
