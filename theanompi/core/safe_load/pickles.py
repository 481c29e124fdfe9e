"""Pickles read without running code: the restricted unpickler, its allow-lists, a pickle's globals (its opcodes).

A pickle builds objects by calling the globals it names; without one it can build
only containers, strings, bytes and numbers. :class:`RestrictedUnpickler` resolves
only the globals its reader allows -- declared as data: ``(module, name)`` pairs such
as :data:`SAFE_GLOBALS` or :data:`NUMPY_ARRAY_GLOBALS`, and optionally the classes and
functions some packages define -- and refuses every other one with
:class:`~theanompi.core.safe_load.errors.UnsafePickleError` before anything is called.
:func:`load_pickle` reads a file with it. :func:`pickle_globals` names the globals a
pickle refers to without unpickling it (the hickle check reads every pickle of a file
this way first).

Example
-------
>>> import pickle, numpy as np
>>> restricted_loads(pickle.dumps({"w": np.arange(3)}), allowed=NUMPY_ARRAY_GLOBALS)["w"]
array([0, 1, 2])
>>> restricted_loads(pickle.dumps(print), source="evil.pkl")
Traceback (most recent call last):
theanompi.core.safe_load.errors.UnsafePickleError: refusing to unpickle 'evil.pkl': ... 'builtins.print' ...
>>> pickle_globals(pickle.dumps([int, None]))
[('builtins', 'int')]
"""

from __future__ import annotations

import enum
import gzip
import io
import os
import pickle
import pickletools
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import open_regular
from theanompi.core.safe_load.errors import UnsafeFileError, UnsafePickleError

#: pickle spells NoneType as ``type(None)``: allowed, ``builtins.type`` resolves to a stand-in that gives only that
TYPE_OF_NONE = ("builtins", "type")
#: Python 3 writes ``bytes`` at protocol 2 as ``_codecs.encode(text, 'latin1')``: allowed, it resolves to a
#: stand-in that does only that
LATIN1_BYTES = ("_codecs", "encode")
#: some Python versions (3.11.2 among them) write an enum member as ``getattr(EnumClass, 'NAME')``: where allowed
#: (a compiled graph's pickle: pytensor's assumptions hold enum members), it resolves to a stand-in that gives only
#: a member of an enum class the pickle may name
ENUM_MEMBER = ("builtins", "getattr")

_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray", "int", "float",
             "complex", "bool", "NoneType", "range", "slice"}
_NUMPY_TYPES = {"ndarray", "dtype", "bool_", "float16", "float32", "float64", "longdouble", "complex64",
                "complex128", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "str_", "bytes_"}
_NUMPY_DTYPES = {"Float32DType", "Float64DType", "Int32DType", "Int64DType", "UInt8DType", "Float16DType",
                 "BoolDType", "Int8DType", "Int16DType", "UInt16DType", "UInt32DType", "UInt64DType", "StrDType",
                 "BytesDType"}
#: numpy's reconstruction of arrays and scalars, in numpy 1.x's spelling and numpy >= 2's
_NUMPY_RECONSTRUCTION = {(module, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray")
                         for name in ("_reconstruct", "scalar")}

#: The globals a pickle of numpy arrays and scalars in containers needs (CIFAR-10's batch files, MNIST's
#: ``mnist.pkl.gz``; Python 2 pickles and Python 3 ones of protocols 2 to 4).
NUMPY_ARRAY_GLOBALS = frozenset(_NUMPY_RECONSTRUCTION | {("numpy", "ndarray"), ("numpy", "dtype"), LATIN1_BYTES})
#: The globals of plain data: containers, numbers, strings, None, numpy arrays, scalars and dtypes (checkpoints).
SAFE_GLOBALS = frozenset({("builtins", name) for name in _BUILTINS} | {TYPE_OF_NONE}
                         | {("numpy", name) for name in _NUMPY_TYPES} | _NUMPY_RECONSTRUCTION
                         | {("numpy.dtypes", name) for name in _NUMPY_DTYPES})


class ReadableBinary(Protocol):
    """What pickle reads a stream through (a file opened ``'rb'``, a gzip file, ``io.BytesIO``)."""

    def read(self, size: int = ..., /) -> bytes: ...

    def readline(self, size: int = ..., /) -> bytes: ...


#: Python 2's names of modules whose globals the allow-lists name (protocols 0-2 write them so)
_PYTHON2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only the globals it is told to allow and refuses every other one.

    Parameters
    ----------
    file : binary file
        The pickle stream.
    source : str
        Name for error messages (usually the path).
    allowed : set of (module, name), optional
        The globals that may be resolved (default :data:`SAFE_GLOBALS`). :data:`TYPE_OF_NONE`,
        :data:`LATIN1_BYTES` and :data:`ENUM_MEMBER` resolve to stand-ins that do only what a pickle of data uses
        them for.
    encoding : str
        As for :class:`pickle.Unpickler` (``'bytes'`` or ``'latin1'`` for Python 2 pickles).
    packages : names of packages, optional
        Besides ``allowed``: every class or function these packages define (the caches' pickles of
        compiled graphs name pytensor's). A module, or anything defined elsewhere, is refused.
    references : mapping, optional
        The objects a persistent id may stand for (another persistent id is refused).

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
    >>> RestrictedUnpickler(io.BytesIO(pickle.dumps(Path)), packages=["pathlib"]).load().__name__
    'Path'
    """

    #: the stand-ins of the allowed globals that are not resolved as they are (the name of the method)
    STAND_INS = {TYPE_OF_NONE: "_type_of_none", LATIN1_BYTES: "_latin1_bytes", ENUM_MEMBER: "_enum_member"}

    def __init__(self, file: ReadableBinary, source: str = "<pickle>", allowed: Iterable[tuple[str, str]] | None = None,
                 encoding: str = "ASCII", packages: Iterable[str] = (),
                 references: Mapping[Any, Any] | None = None) -> None:
        super().__init__(file, encoding=encoding)
        self.source = source
        self.allowed = SAFE_GLOBALS if allowed is None else frozenset(allowed)
        self.packages = tuple(packages)
        self.references = dict(references or {})

    def find_class(self, module: str, name: str) -> Any:
        allowed_as = (_PYTHON2_MODULES.get(module, module), name)
        if allowed_as in self.allowed:
            stand_in = self.STAND_INS.get(allowed_as)
            return getattr(self, stand_in) if stand_in else super().find_class(module, name)
        if _within(module, self.packages):
            found = super().find_class(module, name)  # imports ``module``: one of the allowed packages'
            if isinstance(found, type | types.FunctionType | types.BuiltinFunctionType) \
                    and _within(getattr(found, "__module__", None) or "", self.packages):
                return found
        allowed = "containers, numbers, strings and numpy arrays"
        if self.packages:
            allowed += f" and what {', '.join(self.packages)} define"
        raise UnsafePickleError(f"refusing to unpickle {self.source!r}: it references the global '{module}.{name}' "
                                f"(only {allowed} are allowed)")

    def persistent_load(self, pid: Any) -> Any:
        try:
            return self.references[pid]
        except (KeyError, TypeError):
            raise UnsafePickleError(f"refusing to unpickle {self.source!r}: it uses a persistent id ({pid!r}) that "
                                    "stands for nothing it may refer to") from None

    def _type_of_none(self, obj: object = None, *rest: object) -> type[None]:
        if obj is not None or rest:
            raise UnsafePickleError(f"refusing to unpickle {self.source!r}: it calls builtins.type other than as "
                                    "type(None)")
        return type(None)

    def _enum_member(self, cls: object, name: object, *rest: object) -> enum.Enum:
        if rest or not (isinstance(cls, enum.EnumMeta) and isinstance(name, str) and name in cls.__members__):
            raise UnsafePickleError(f"refusing to unpickle {self.source!r}: it calls builtins.getattr other than for "
                                    "a member of an enum class it may name")
        return cls[name]

    def _latin1_bytes(self, text: object, encoding: str = "latin1") -> bytes:
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise UnsafePickleError(f"refusing to unpickle {self.source!r}: it calls _codecs.encode with "
                                    f"{type(text).__name__}, {encoding!r} (only the latin1 spelling of bytes is "
                                    "allowed)")
        return text.encode("latin-1")


def restricted_loads(data: bytes, source: str = "<pickle>", allowed: Iterable[tuple[str, str]] | None = None) -> Any:
    """``pickle.loads`` that resolves only ``allowed`` globals (default :data:`SAFE_GLOBALS`)."""
    return RestrictedUnpickler(io.BytesIO(bytes(data)), source=source, allowed=allowed).load()


def load_pickle(path: str | Path, allowed: Iterable[tuple[str, str]] | None = None, *, what: str = "pickle file",
                encoding: str = "ASCII", gzipped: bool = False) -> Any:
    """The object pickled in the file ``path`` (gzip-compressed if ``gzipped``), read by :class:`RestrictedUnpickler`.

    Raises
    ------
    ConfigError
        The file is missing or not a readable pickle; the message names it as ``what``.
    UnsafePickleError
        The pickle references a global outside ``allowed`` (default :data:`SAFE_GLOBALS`); nothing ran.

    Example
    -------
    >>> import os, pickle, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "batch")
    >>> with open(path, "wb") as f:
    ...     pickle.dump({b"labels": [1, 2]}, f, protocol=2)
    >>> load_pickle(path, NUMPY_ARRAY_GLOBALS, what="CIFAR-10 file", encoding="bytes")
    {b'labels': [1, 2]}
    >>> load_pickle(path + ".gz", what="MNIST file", gzipped=True)
    Traceback (most recent call last):
    theanompi.core.errors.ConfigError: MNIST file '/tmp/.../batch.gz' is missing
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise ConfigError(f"{what} '{path}' is missing")
    raw = os.fdopen(open_regular(path, what), "rb")  # a FIFO or a device is refused (UnexpectedEntry)
    try:
        with raw, gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw as f:
            return RestrictedUnpickler(f, source=str(path), allowed=allowed, encoding=encoding).load()
    except UnsafeFileError:
        raise
    except Exception as e:  # not gzip, truncated, not a pickle, bad state for numpy, ...
        kind = "gzipped pickle" if gzipped else "pickle"
        raise ConfigError(f"{what} '{path}' is not a readable {kind}: {type(e).__name__}: {e}") from None


# ----- a pickle's globals, read off its opcodes (nothing is unpickled) --------------------------------------------
class UncheckablePickle(ValueError):
    """A pickle whose globals cannot be read off its opcodes, or that does more than reading allows."""


#: opcodes that push a string (the operands of STACK_GLOBAL)
_STRING_PUSHES = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
                  "SHORT_BINSTRING"}
#: opcodes that leave the stack as it is
_NEUTRAL = {"PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}
#: opcodes that fetch from the memo
_MEMO_GETS = {"GET", "BINGET", "LONG_BINGET"}
#: the opcodes of a pickle that only names a global (as hickle's type entries do)
_REFERENCE_ONLY = _STRING_PUSHES | _NEUTRAL | _MEMO_GETS | {"GLOBAL", "STACK_GLOBAL", "STOP"}


def pickle_globals(raw: bytes) -> list[tuple[str, str]]:
    """The ``(module, name)`` of every global the pickle ``raw`` refers to, read off its opcodes.

    A global whose name is built in a way this reading does not follow (anything but two strings pushed,
    or fetched from the memo, right before STACK_GLOBAL), an extension-registry code or a persistent id
    raises :class:`UncheckablePickle`: nothing of the kind is in a pickle Python's own pickler writes.

    >>> pickle_globals(b"\\x80\\x04\\x8c\\x05posix\\x94\\x8c\\x06system\\x94\\x93.")
    [('posix', 'system')]
    >>> pickle_globals(b"\\x80\\x04(\\x8c\\x05posix\\x8c\\x06system\\x93.")
    [('posix', 'system')]
    >>> pickle_globals(b"\\x80\\x04\\x8c\\x05posix\\x8c\\x06system\\x85\\x93.")
    Traceback (most recent call last):
    theanompi.core.safe_load.pickles.UncheckablePickle: a global whose name is not two strings pushed right before it
    """
    found: list[tuple[str, str]] = []
    top: list[str | None] = []  # what each stack-changing opcode left on top (None: not a known string)
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(raw):
            name = op.name
            if name in ("GLOBAL", "INST"):
                module, _, attribute = str(arg).partition(" ")
                found.append((module, attribute))
                top.append(None)
            elif name == "STACK_GLOBAL":
                pushed = top[-2:] if len(top) >= 2 else [None, None]
                if pushed[0] is None or pushed[1] is None:
                    raise UncheckablePickle("a global whose name is not two strings pushed right before it")
                found.append((pushed[0], pushed[1]))
                top[-2:] = [None]
            elif name in ("EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"):
                raise UncheckablePickle(f"opcode {name} (an object from outside the pickle)")
            elif name == "MEMOIZE":
                memo[len(memo)] = top[-1] if top else None
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(str(arg))] = top[-1] if top else None
            elif name in _MEMO_GETS:
                top.append(memo.get(int(str(arg))))
            elif name in _STRING_PUSHES:
                top.append(arg if isinstance(arg, str) else None)
            elif name not in _NEUTRAL:
                top.append(None)
    except UncheckablePickle:
        raise
    except Exception as err:  # pickletools: a truncated or malformed stream
        raise UncheckablePickle(f"not a readable pickle ({err})") from None
    return found


def referenced_global(raw: bytes) -> tuple[str, str]:
    """The one global a pickle that does nothing but name it refers to (a hickle type entry is one).

    :class:`UncheckablePickle` for a pickle that runs any other opcode, or names no global or several.

    >>> referenced_global(pickle.dumps(dict))
    ('builtins', 'dict')
    >>> referenced_global(pickle.dumps(range(3)))
    Traceback (most recent call last):
    theanompi.core.safe_load.pickles.UncheckablePickle: a pickle that runs opcode BININT1
    """
    try:
        beyond = next((op.name for op, _, _ in pickletools.genops(raw) if op.name not in _REFERENCE_ONLY), None)
    except Exception as err:  # pickletools: a truncated or malformed stream
        raise UncheckablePickle(f"not a readable pickle ({err})") from None
    if beyond is not None:
        raise UncheckablePickle(f"a pickle that runs opcode {beyond}")
    found = pickle_globals(raw)
    if len(found) != 1:
        raise UncheckablePickle(f"a pickle naming {len(found)} globals, not one type")
    return found[0]
