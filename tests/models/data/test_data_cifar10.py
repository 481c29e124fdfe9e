"""CIFAR-10 loader on small files written in the official format; the restricted unpickler."""

import io
import os
import pickle
import sys

import numpy as np
import pytest
from conftest import ASSETS

sys.path.insert(0, str(ASSETS))
from cifar_format import Py2Pickler, official_bytes  # noqa: F401

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load import RestrictedUnpickler, UnsafePickleError
from theanompi.models.data.cifar10 import Cifar10Data, load_cifar10, safe_unpickle


def batch_dict(data, labels, label="training batch"):
    return {b"batch_label": label.encode(), b"labels": [int(v) for v in labels], b"data": data,
            b"filenames": [f"img_{i}.png".encode() for i in range(len(labels))]}


def write_cifar(root, n_per_file=(6, 6, 6, 6, 6), n_test=8, seed=0):
    """The six files with random images; returns (x_train, y_train, x_test, y_test) as written."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i, n in enumerate(n_per_file, start=1):
        x, y = rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, 10, n)
        (root / f"data_batch_{i}").write_bytes(official_bytes(batch_dict(x, y, f"training batch {i} of 5")))
        xs.append(x), ys.append(y)
    xt, yt = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8), rng.integers(0, 10, n_test)
    (root / "test_batch").write_bytes(official_bytes(batch_dict(xt, yt, "testing batch 1 of 1")))
    return np.concatenate(xs), np.concatenate(ys), xt, yt


class Evil:
    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return (self.func, (self.arg,))


def test_official_format_is_what_the_test_writes(tmp_path):
    write_cifar(tmp_path)
    raw = (tmp_path / "data_batch_1").read_bytes()
    assert raw.startswith(b"\x80\x02") and b"cnumpy.core.multiarray\n_reconstruct\n" in raw
    assert b"U\x04data" in raw  # a Python 2 str key
    batch = safe_unpickle(tmp_path / "data_batch_1")
    assert set(batch) == {b"batch_label", b"labels", b"data", b"filenames"}


def test_loads_images_nchw_scaled_with_int_labels(tmp_path):
    x, y, xt, yt = write_cifar(tmp_path)
    d = Cifar10Data(tmp_path, batch_size=5, rank=0, size=1, seed=0, subtract_mean=False)
    assert d.x_train.shape == (30, 3, 32, 32) and d.input_shape == (3, 32, 32)
    assert d.n_batch_train == 6 and d.n_batch_val == 2
    idx = d.train_indices(1)
    xb, yb = d.train_batch(1)
    assert xb.dtype == np.float32 and yb.dtype == np.int32 and xb.shape == (5, 3, 32, 32)
    np.testing.assert_allclose(xb, x[idx].reshape(5, 3, 32, 32) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(yb, y[idx])
    # the first 1024 values of a row are the red plane, row-major
    np.testing.assert_allclose(xb[0, 0, 0, :], x[idx[0], :32] / 255.0, rtol=1e-6)
    np.testing.assert_allclose(xb[0, 2, 31, :], x[idx[0], -32:] / 255.0, rtol=1e-6)
    xv, yv = d.val_batch(1)
    np.testing.assert_allclose(xv, xt[5:8].reshape(3, 3, 32, 32) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(yv, yt[5:8])


def test_per_channel_mean_subtraction(tmp_path):
    x, _, _, _ = write_cifar(tmp_path)
    d = Cifar10Data(tmp_path, batch_size=4, rank=0, size=1, seed=0)
    expected = x.reshape(-1, 3, 1024).mean(axis=(0, 2)) / 255.0
    np.testing.assert_allclose(d.mean.ravel(), expected, rtol=1e-5)
    idx = d.train_indices(0)
    xb, _ = d.train_batch(0)
    ref = x[idx].reshape(4, 3, 32, 32) / 255.0 - expected[None, :, None, None]
    np.testing.assert_allclose(xb, ref, atol=1e-6)
    np.testing.assert_allclose(np.mean([d.train_batch(c)[0].mean(axis=(0, 2, 3)) for c in range(8)], axis=0),
                               0.0, atol=0.03)


def test_train_and_val_size_subset_in_file_order_and_skip_unneeded_files(tmp_path):
    x, y, xt, yt = write_cifar(tmp_path)
    (tmp_path / "data_batch_5").write_bytes(b"not read when train_size fits in the first files")
    (xs, ys), (xv, yv) = load_cifar10(tmp_path, train_size=8, val_size=3)
    np.testing.assert_array_equal(xs.reshape(8, -1), x[:8])
    np.testing.assert_array_equal(ys, y[:8])
    np.testing.assert_array_equal(xv.reshape(3, -1), xt[:3])
    np.testing.assert_array_equal(yv, yt[:3])
    for bad in (0, -1, "8", True):
        with pytest.raises(ConfigError, match=f"train_size={bad!r} is not allowed"):
            load_cifar10(tmp_path, train_size=bad)
    with pytest.raises(ConfigError, match=r"val_size=9 is not allowed; use an integer in 1\.\.8"):
        load_cifar10(tmp_path, train_size=8, val_size=9)


def test_train_size_larger_than_the_files(tmp_path):
    write_cifar(tmp_path)
    with pytest.raises(ConfigError, match=r"train_size=31 is not allowed; use an integer in 1\.\.30"):
        load_cifar10(tmp_path, train_size=31)


def test_ranks_get_disjoint_complete_equal_shards(tmp_path):
    write_cifar(tmp_path)
    shards = [Cifar10Data(tmp_path, 4, rank=r, size=3, seed=7, train_size=25) for r in range(3)]
    assert len({s.n_batch_train for s in shards}) == 1
    seen = np.concatenate([s.train_indices(b) for b in range(shards[0].n_batch_train) for s in shards])
    assert set(seen) == set(range(25)) and len(seen) == 3 * 4 * shards[0].n_batch_train
    val = np.concatenate([s.val_indices for s in shards])
    np.testing.assert_array_equal(np.sort(val), np.arange(8))


@pytest.mark.parametrize("func, make_arg, global_name", [
    (os.system, lambda m: f"touch '{m}'", f"{os.system.__module__}.system"),
    (exec, lambda m: f"open({str(m)!r}, 'w').close()", "__builtin__.exec"),  # protocol 2 spelling
])
def test_malicious_pickle_is_refused_without_running_anything(tmp_path, func, make_arg, global_name):
    write_cifar(tmp_path)
    # the payload is live: plain pickle runs it
    probe = tmp_path / "probe"
    pickle.loads(official_bytes(Evil(func, make_arg(probe))), encoding="bytes")
    assert probe.exists()

    marker = tmp_path / "pwned"
    evil = batch_dict(Evil(func, make_arg(marker)), [0])
    path = tmp_path / "data_batch_1"
    path.write_bytes(official_bytes(evil))
    with pytest.raises(UnsafePickleError) as info:
        Cifar10Data(tmp_path, 4, rank=0, size=1, seed=0)
    msg = str(info.value)
    assert str(path) in msg and f"'{global_name}'" in msg and "\n" not in msg
    assert isinstance(info.value, ConfigError)
    assert not marker.exists()


def test_only_numpy_reconstruction_globals_are_allowed(tmp_path):
    # protocol 5 pickles arrays via numpy._core.numeric._frombuffer: not in the list, refused
    raw = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, protocol=5)
    with pytest.raises(UnsafePickleError, match=r"'numpy\._core\.numeric\._frombuffer'"):
        RestrictedUnpickler(io.BytesIO(raw), source="p5").load()
    # protocols 3 and 4 (Python 3 writers) only use the allowed globals
    for proto in (3, 4):
        raw = pickle.dumps({b"data": np.ones((2, 3072), np.uint8), b"labels": [1, 2]}, protocol=proto)
        out = RestrictedUnpickler(io.BytesIO(raw)).load()
        assert out[b"data"].shape == (2, 3072)


def test_missing_directory_and_file(tmp_path):
    with pytest.raises(ConfigError, match="CIFAR-10 directory '.*nowhere' does not exist"):
        Cifar10Data(tmp_path / "nowhere", 4, 0, 1, 0)
    write_cifar(tmp_path)
    (tmp_path / "test_batch").unlink()
    with pytest.raises(ConfigError, match="CIFAR-10 file '.*test_batch' is missing"):
        Cifar10Data(tmp_path, 4, 0, 1, 0)


@pytest.mark.parametrize("content, pattern", [
    (batch_dict(np.zeros((3, 100), np.uint8), [0, 1, 2]), r"data has shape \(3, 100\) and dtype uint8; expected uint8"),
    (batch_dict(np.zeros((3, 3072), np.float32), [0, 1, 2]), r"dtype float32"),
    (batch_dict(np.zeros((3, 3072), np.uint8), [0, 10, 2]), r"label 10 at index 1 is outside 0\.\.9"),
    (batch_dict(np.zeros((3, 3072), np.uint8), [0, -1, 2]), r"label -1 at index 1 is outside 0\.\.9"),
    (batch_dict(np.zeros((3, 3072), np.uint8), [0, 1]), r"3 images but labels of shape \(2,\)"),
    ({b"labels": [0]}, r"has no b'data' entry"),
    ([1, 2, 3], r"holds a list, not a dict"),
])
def test_bad_contents_name_the_file_and_value(tmp_path, content, pattern):
    write_cifar(tmp_path)
    path = tmp_path / "data_batch_2"
    path.write_bytes(official_bytes(content))
    with pytest.raises(ConfigError, match=pattern) as info:
        Cifar10Data(tmp_path, 4, 0, 1, 0)
    assert str(path) in str(info.value)


def test_truncated_file_is_a_config_error(tmp_path):
    write_cifar(tmp_path)
    path = tmp_path / "data_batch_3"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ConfigError, match=r"data_batch_3' is not a readable pickle"):
        Cifar10Data(tmp_path, 4, 0, 1, 0)
