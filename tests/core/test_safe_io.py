import os
import pickle
import subprocess
import sys

import h5py
import hickle
import numpy as np
import pytest
from conftest import ROOT

from theanompi.core.errors import ConfigError
from theanompi.core.safe_io import atomic_write, atomic_write_text, save_hickle_atomically
from theanompi.core.safe_load import UnsafeFileError, load_hickle

HITS = []


def mark(value):  # would run on an unsafe load
    HITS.append(value)
    return value


class Evil:
    def __reduce__(self):
        return (mark, ("pwned",))


def test_round_trip_of_plain_data(tmp_path):
    obj = {"params": [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(2)], "epoch": 3, "name": "x",
           "lr": 0.5, "flags": [True, None], "scalar": np.float64(2.5)}
    path = save_hickle_atomically(obj, tmp_path / "c.hkl")
    back = load_hickle(path)
    assert back["epoch"] == 3 and back["name"] == "x" and back["flags"] == [True, None]
    np.testing.assert_array_equal(back["params"][0], obj["params"][0])
    assert [p.name for p in tmp_path.iterdir()] == ["c.hkl"]  # no temporary file left


def test_pickled_code_is_refused_without_running(tmp_path):
    import hickle

    hickle.dump({"a": np.ones(2), "evil": Evil()}, str(tmp_path / "evil.hkl"), mode="w")
    HITS.clear()
    with pytest.raises(UnsafeFileError, match="it references the global 'test_safe_io.Evil'|"
                                              "it references the global 'test_safe_io.mark'"):
        load_hickle(tmp_path / "evil.hkl")
    assert HITS == []


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "bad.hkl"
    bad.write_bytes(b"not an hdf5 file at all")
    with pytest.raises(ConfigError, match="not a readable hickle file"):
        load_hickle(bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_hickle(tmp_path / "none.hkl")


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = atomic_write_text(tmp_path / "latest", "old")

    def half_write(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(path, half_write)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_a_write_on_a_read_only_file_system_raises_its_own_error_only(tmp_path, monkeypatch):
    """The clean-up of the temporary file fails too there: the error the caller sees is the write's."""
    from theanompi.core.no_follow import Folder

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Folder, "open_file", read_only)
    monkeypatch.setattr(Folder, "discard", read_only)
    with pytest.raises(OSError, match="Read-only file system") as caught:
        atomic_write_text(tmp_path / "rc", "x")
    assert caught.value.__context__ is None  # not a second error raised on top of it


def test_atomic_write_gives_the_mode_asked_for_whatever_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        path = atomic_write_text(tmp_path / "entry", "x", mode=0o600)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_full_disk_under_hickle_is_an_oserror_naming_the_file(tmp_path, monkeypatch):
    """h5py reports ENOSPC as a RuntimeError ('... errno = 28 ...'): it becomes OSError(ENOSPC) naming the path."""
    def full(obj, hdf5):
        hdf5.create_dataset("half", data=np.zeros(4))
        raise RuntimeError("Unable to synchronously flush file (file write failed: errno = 28, error message = "
                           "'No space left on device')")

    monkeypatch.setattr(hickle, "dump", full)
    with pytest.raises(OSError) as caught:
        save_hickle_atomically({"a": 1}, tmp_path / "c.hkl")
    assert caught.value.errno == 28 and caught.value.filename == str(tmp_path / "c.hkl")
    assert list(tmp_path.iterdir()) == []  # the half-written temporary file is gone


def test_atomic_write_keeps_the_suffix_a_writer_needs(tmp_path):
    path = atomic_write(tmp_path / "final_params.npz", lambda f: np.savez(f, p000=np.arange(3)))
    with np.load(path, allow_pickle=False) as data:
        np.testing.assert_array_equal(data["p000"], np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["final_params.npz"]


# ----- every way hickle reaches a pickle, tried in a real process with a payload that leaves a marker ----------------
class Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hickle_v3_file(path, marker):
    """hickle 3's layout: hickle.load hands it to hickle.legacy_v3, which unpickles with dill."""
    with h5py.File(path, "w") as f:
        f.attrs.update({"CLASS": b"hickle", "VERSION": "3.4.9", "PYTHON_VERSION": "3.11"})
        f.attrs["type"] = np.array([b"hickle"], dtype="S6")
        node = f.create_dataset("data_0", data=[np.void(pickle.dumps(Payload(marker), protocol=0))])
        node.attrs["type"] = np.array([b"pickle"], dtype="S6")


def _type_table_entry(path, marker):
    """hickle 5: a node's type points at a type-table entry holding pickled code."""
    hickle.dump({"epoch": 3}, str(path), mode="w")
    with h5py.File(path, "r+") as f:
        raw = pickle.dumps(Payload(marker))
        entry = f["hickle_types_table"].create_dataset("evil", data=np.frombuffer(raw, "S1").reshape(1, -1))
        entry.attrs["base_type"] = f["hickle_types_table/int"].ref
        f['data/"epoch"'].attrs["type"] = entry.ref


def _inline_type(path, marker):
    """hickle 4.0: the pickled type in the node's own attribute."""
    hickle.dump({"epoch": 3}, str(path), mode="w")
    with h5py.File(path, "r+") as f:
        f.attrs["HICKLE_VERSION"] = "4.0.4"
        f['data/"epoch"'].attrs["type"] = np.void(pickle.dumps(Payload(marker)))
        f['data/"epoch"'].attrs["base_type"] = b"int"


def _pickled_data(path, marker):
    """hickle 5: an object hickle cannot map is stored as a pickle."""
    hickle.dump({"epoch": 3, "extra": Payload(marker)}, str(path), mode="w")


def _link_out_of_the_file(path, marker):
    """A node that is a link to another file, which holds pickled code."""
    other = path.with_name("other.hkl")
    _pickled_data(other, marker)
    hickle.dump({"epoch": 3}, str(path), mode="w")
    with h5py.File(path, "r+") as f:
        f['data/"extra"'] = h5py.ExternalLink(str(other), '/data/"extra"')

HICKLE_PATHS = {
    "hickle v3 file (dill)": (_hickle_v3_file, "it is a hickle v3 file"),
    "type-table entry": (_type_table_entry, "it references the global 'posix.system' in the type of node"),
    "hickle 4.0 inline type": (_inline_type, "it references the global 'posix.system' in the type of node"),
    "pickled data node": (_pickled_data, "it references the global 'posix.system' in node '/data/\"extra\"'"),
    "external link": (_link_out_of_the_file, "is a ExternalLink"),
}
#: stand-ins for dill, six and pkg_resources, which hickle.legacy_v3 imports (installed wherever they are common)
LEGACY_V3_MODULES = {
    "dill.py": "from pickle import *  # noqa\nfrom pickle import dumps, loads  # noqa\n",
    "six.py": "PY2, PY3 = False, True\nstring_types, integer_types = (str,), (int,)\n",
    "pkg_resources.py": "class DistributionNotFound(Exception):\n    pass\n\n\ndef get_distribution(name):\n"
                        "    raise DistributionNotFound(name)\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(HICKLE_PATHS))
def test_no_path_through_hickle_runs_a_payload(tmp_path, how):
    build, fragment = HICKLE_PATHS[how]
    marker = tmp_path / "payload-ran"
    build(tmp_path / "ckpt.hkl", marker)
    modules = tmp_path / "modules"
    modules.mkdir()
    for name, text in LEGACY_V3_MODULES.items():
        (modules / name).write_text(text)
    code = ("import sys\nfrom theanompi.core.safe_load import UnsafeFileError, load_hickle\n"
            "try:\n    load_hickle(sys.argv[1])\nexcept UnsafeFileError as err:\n    print(err)\n    sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(modules)])}
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt.hkl")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert fragment in proc.stdout, proc.stdout
    assert not marker.exists()
