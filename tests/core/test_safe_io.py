import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.safe_io import UnsafeFileError, atomic_write, atomic_write_text, load_hickle, save_hickle_atomically

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

    def half_write(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(path, half_write)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_atomic_write_keeps_the_suffix_a_writer_needs(tmp_path):
    path = atomic_write(tmp_path / "final_params.npz", lambda tmp: np.savez(tmp, p000=np.arange(3)))
    with np.load(path, allow_pickle=False) as data:
        np.testing.assert_array_equal(data["p000"], np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["final_params.npz"]
