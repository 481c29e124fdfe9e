"""The safe loader's own rules: one error family, the stand-ins of the globals a pickle of data needs (NoneType,
bytes, enum members), and ``packages`` resolving only what those packages define. (Each loader's refusals are
tested with it: checkpoints in test_safe_io.py, data sets in tests/models/data/, the caches in tests/backend/.)"""

from __future__ import annotations

import collections
import enum
import io
import os
import pickle
import pickletools

import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load import (
    NUMPY_ARRAY_GLOBALS,
    SAFE_GLOBALS,
    RestrictedUnpickler,
    UnsafeFileError,
    UnsafeHickleError,
    UnsafePickleError,
    load_hickle,
    load_pickle,
    read_hickle,
)
from theanompi.core.safe_load.pickles import ENUM_MEMBER


def unpickle(raw: bytes, **kwargs):
    return RestrictedUnpickler(io.BytesIO(raw), source="f.pkl", **kwargs).load()


def stack_global(module: str, name: str) -> bytes:
    """A protocol-4 pickle of the global ``module.name`` (``name`` may be dotted)."""
    return b"".join([b"\x80\x04", *(b"\x8c" + bytes([len(s)]) + s.encode() for s in (module, name)), b"\x93."])


def global_call(module: str, name: str, *args: str) -> bytes:
    """A protocol-2 pickle of ``module.name(*args)`` (str arguments)."""
    body = b"".join(b"X" + len(a.encode()).to_bytes(4, "little") + a.encode() for a in args)
    return b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"(" + body + b"tR."


def test_every_refusal_is_one_family_of_config_errors(tmp_path):
    assert issubclass(UnsafePickleError, UnsafeFileError) and issubclass(UnsafeHickleError, UnsafeFileError)
    assert issubclass(UnsafeFileError, ConfigError)
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(os.system))
    with pytest.raises(UnsafeFileError) as caught:
        load_pickle(tmp_path / "evil.pkl")
    assert type(caught.value) is UnsafePickleError and "\n" not in str(caught.value)
    import hickle

    hickle.dump({"a": 1, "order": collections.OrderedDict(b=2)}, str(tmp_path / "c.hkl"), mode="w")
    for read in (load_hickle, read_hickle):
        with pytest.raises(UnsafeFileError) as caught:
            read(tmp_path / "c.hkl")
        assert type(caught.value) is UnsafeHickleError


def test_python3_protocol2_bytes_are_read_and_nothing_else_of_codecs_encode():
    raw = pickle.dumps({b"data": b"\x00\xff"}, protocol=2)
    assert b"_codecs" in raw and unpickle(raw, allowed=NUMPY_ARRAY_GLOBALS) == {b"data": b"\x00\xff"}
    with pytest.raises(UnsafePickleError, match=r"calls _codecs\.encode with str, 'rot13'"):
        unpickle(global_call("_codecs", "encode", "abc", "rot13"), allowed=NUMPY_ARRAY_GLOBALS)
    with pytest.raises(UnsafePickleError, match=r"'_codecs\.encode'"):  # not in the default allow-list
        unpickle(raw)


def test_type_resolves_to_type_of_none_only():
    assert unpickle(pickle.dumps([type(None)], protocol=4)) == [type(None)]
    assert unpickle(pickle.dumps([type(None)], protocol=2)) == [type(None)]  # Python 2's name: __builtin__.type
    with pytest.raises(UnsafePickleError, match=r"calls builtins\.type other than as type\(None\)"):
        unpickle(global_call("builtins", "type", "x"))


class Colour(enum.Enum):
    RED = 1


class ByName:
    """Pickles as ``getattr(owner, name)``: how Python 3.11.2 writes an enum member (3.11.7 writes ``Colour(1)``)."""

    def __init__(self, owner: object, name: str):
        self.owner, self.name = owner, name

    def __reduce__(self):
        return (getattr, (self.owner, self.name))


def test_getattr_resolves_only_to_a_member_of_an_enum_class_the_pickle_may_name():
    allowed = SAFE_GLOBALS | {ENUM_MEMBER, (__name__, "Colour")}
    raw = pickle.dumps([ByName(Colour, "RED")], protocol=4)
    assert b"getattr" in raw and unpickle(raw, allowed=allowed) == [Colour.RED]
    for owner, name in ((Colour, "__class__"), (dict, "fromkeys")):  # not a member; not an enum
        with pytest.raises(UnsafePickleError, match=r"calls builtins\.getattr other than for a member of an enum"):
            unpickle(pickle.dumps(ByName(owner, name), protocol=4), allowed=allowed)
    with pytest.raises(UnsafePickleError, match=r"'builtins\.getattr'"):  # not in the default allow-list
        unpickle(raw, allowed=SAFE_GLOBALS | {(__name__, "Colour")})


def test_packages_allow_what_they_define_never_a_module_or_a_name_leading_elsewhere():
    assert unpickle(pickle.dumps(pickletools.genops), packages=["pickletools"]) is pickletools.genops
    refused = {
        "a module": stack_global("pickletools", "codecs"),  # pickletools imports codecs
        "another package's function by a dotted name": stack_global("pickletools", "codecs.decode"),
        "a package outside": pickle.dumps(os.system),
    }
    for case, raw in refused.items():
        with pytest.raises(UnsafePickleError, match="it references the global") as caught:
            unpickle(raw, packages=["pickletools"])
        assert "what pickletools define" in str(caught.value), case


def test_persistent_ids_stand_only_for_the_given_references():
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("ref", 0) if obj is marker else None

    marker, buffer = object(), io.BytesIO()
    Pickler(buffer, protocol=4).dump([marker, 1])
    assert unpickle(buffer.getvalue(), references={("ref", 0): "bound"}) == ["bound", 1]
    with pytest.raises(UnsafePickleError, match=r"persistent id \(\('ref', 0\)\)"):
        unpickle(buffer.getvalue())
