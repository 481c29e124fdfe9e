"""Hickle batch directories: round trips, crops/flips/mean, file sharding, refusal of pickled content."""

import os
import pickle
import warnings

import h5py
import hickle
import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load import UnsafeHickleError, read_hickle
from theanompi.models.data.hickle_batches import HickleBatchData

C, H, W, B = 3, 8, 10, 4


def images(n_files, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n_files, B, C, H, W), dtype=np.uint8)


def write_dir(d, imgs, labels=None, layout="bchw", as_dict=True):
    """One file per batch; dicts with labels or bare arrays (labels -> labels.npy beside the dir)."""
    d.mkdir(parents=True, exist_ok=True)
    if labels is None:
        labels = np.arange(imgs.shape[0] * B).reshape(-1, B) % 10
    for k, x in enumerate(imgs):
        arr = x if layout == "bchw" else np.ascontiguousarray(x.transpose(1, 2, 3, 0))
        obj = {"data": arr, "labels": np.asarray(labels[k], np.int64)} if as_dict else arr
        hickle.dump(obj, str(d / f"{k}.hkl"))
    if not as_dict:
        np.save(d.parent / f"{d.name}_labels.npy", np.asarray(labels).reshape(-1))
    return labels


def test_read_hickle_v5_arrays_and_dicts(tmp_path):
    x = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    hickle.dump(x, str(tmp_path / "a.hkl"))
    np.testing.assert_array_equal(read_hickle(tmp_path / "a.hkl"), x)
    hickle.dump({"data": x, "labels": [1, 2], "meta": {"n": 3}}, str(tmp_path / "b.hkl"))
    d = read_hickle(tmp_path / "b.hkl")
    np.testing.assert_array_equal(d["data"], x)
    assert d["labels"].tolist() == [1, 2] and d["meta"]["n"] == 3


def test_read_hickle_v3_layout_and_plain_hdf5(tmp_path):
    x = np.arange(12, dtype=np.uint8).reshape(3, 4)
    with h5py.File(tmp_path / "v3.hkl", "w") as f:  # what hickle 2/3 (Theano-MPI's era) wrote
        f.attrs["CLASS"], f.attrs["VERSION"], f.attrs["PYTHON_VERSION"] = b"hickle", "3.4.9", "2.7.18"
        f.create_dataset("data_0", data=x).attrs["type"] = [b"ndarray"]
    np.testing.assert_array_equal(read_hickle(tmp_path / "v3.hkl"), x)
    with h5py.File(tmp_path / "v3d.hkl", "w") as f:
        f.attrs["CLASS"], f.attrs["VERSION"], f.attrs["PYTHON_VERSION"] = b"hickle", "3.4.9", "3.6.0"
        g = f.create_group("data_0")
        g.attrs["type"] = [b"<class 'dict'>"]
        item = g.create_group("'data'")
        item.attrs["type"], item.attrs["key_type"] = [b"dict_item"], [b"<class 'str'>"]
        item.create_dataset("data_0", data=x).attrs["type"] = [b"ndarray"]
    np.testing.assert_array_equal(read_hickle(tmp_path / "v3d.hkl")["data"], x)
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["data"], f["labels"] = x, np.arange(3)
    assert sorted(read_hickle(tmp_path / "plain.h5")) == ["data", "labels"]


@pytest.mark.parametrize("layout", ["bchw", "chwb"])
@pytest.mark.parametrize("as_dict", [True, False])
def test_round_trip_without_crop_or_mean(tmp_path, layout, as_dict):
    imgs, vimgs = images(5), images(3, seed=1)
    labels = write_dir(tmp_path / "train", imgs, layout=layout, as_dict=as_dict)
    vlabels = write_dir(tmp_path / "val", vimgs, labels=np.arange(12).reshape(3, 4) % 7, layout=layout,
                        as_dict=as_dict)
    extra = {} if as_dict else {"train_labels": tmp_path / "train_labels.npy",
                                "val_labels": tmp_path / "val_labels.npy"}
    d = HickleBatchData(tmp_path / "train", 0, 1, 0, val_dir=tmp_path / "val", layout=layout, flip=False,
                        scale=1.0, n_classes=10, **extra)
    assert d.batch_size == B and d.input_shape == (C, H, W) and d.x_train.shape == (20, C, H, W)
    assert d.n_batch_train == 5 and d.n_batch_val == 3
    for count in range(d.n_batch_train):
        k = d.train_indices(count)[0]
        xb, yb = d.train_batch(count)
        assert xb.dtype == np.float32 and yb.dtype == np.int32
        np.testing.assert_array_equal(xb, imgs[k])
        np.testing.assert_array_equal(yb, labels[k])
    for count in range(3):
        xb, yb = d.val_batch(count)
        np.testing.assert_array_equal(xb, vimgs[count])
        np.testing.assert_array_equal(yb, vlabels[count])


def crops_of(ref, c):
    """Every (y, x, flip) crop of one (C, H, W) image."""
    for y in range(ref.shape[1] - c + 1):
        for x in range(ref.shape[2] - c + 1):
            v = ref[:, y:y + c, x:x + c]
            yield (y, x, False), v
            yield (y, x, True), v[:, :, ::-1]


@pytest.mark.parametrize("mean_kind", ["image", "channel"])
def test_random_crops_flips_and_mean(tmp_path, mean_kind):
    imgs = images(6)
    write_dir(tmp_path / "train", imgs)
    write_dir(tmp_path / "val", imgs[:2])
    rng = np.random.default_rng(5)
    mean = rng.uniform(0, 255, (C, H, W) if mean_kind == "image" else (C,)).astype(np.float32)
    if mean_kind == "image":
        hickle.dump(mean, str(tmp_path / "mean.hkl"))
        mean_file, full_mean = tmp_path / "mean.hkl", mean
    else:
        np.save(tmp_path / "mean.npy", mean)
        mean_file, full_mean = tmp_path / "mean.npy", np.broadcast_to(mean[:, None, None], (C, H, W))
    kw = dict(val_dir=tmp_path / "val", mean_file=mean_file, crop_size=6, scale=0.5, n_classes=10)
    d = HickleBatchData(tmp_path / "train", 0, 1, seed=3, **kw)
    assert d.input_shape == (C, 6, 6)
    offsets, flips = set(), set()
    for epoch in (0, 1):
        d.set_epoch(epoch)
        for count in range(d.n_batch_train):
            k = d.train_indices(count)[0]
            xb, _ = d.train_batch(count)
            for i in range(B):
                ref = (imgs[k, i].astype(np.float32) - full_mean) * 0.5
                matches = [how for how, v in crops_of(ref, 6) if np.allclose(v, xb[i], atol=1e-4)]
                assert matches, f"image {i} of file {k} is no crop of the source"
                offsets.add(matches[0][:2]), flips.add(matches[0][2])
    assert flips == {False, True} and len(offsets) > 5
    # validation: the center crop, no flip
    xv, _ = d.val_batch(1)
    np.testing.assert_allclose(xv, (imgs[1].astype(np.float32) - full_mean)[:, :, 1:7, 2:8] * 0.5, atol=1e-4)
    # seeded: the same seed and epoch give the same batches, another epoch other crops
    d2 = HickleBatchData(tmp_path / "train", 0, 1, seed=3, **kw)
    d.set_epoch(4), d2.set_epoch(4)
    np.testing.assert_array_equal(d.train_batch(2)[0], d2.train_batch(2)[0])
    a = [d.train_batch(c)[0] for c in range(6)]
    d.set_epoch(5)
    b = {d.train_indices(c)[0]: d.train_batch(c)[0] for c in range(6)}
    d.set_epoch(4)
    assert any(not np.array_equal(a[c], b[d.train_indices(c)[0]]) for c in range(6))


@pytest.mark.parametrize("n_files, size", [(7, 3), (6, 2), (2, 4), (5, 1)])
def test_file_shards_equal_complete_and_disjoint(tmp_path, n_files, size):
    imgs = images(n_files)
    labels = np.arange(n_files * B).reshape(n_files, B)  # label = global image index
    write_dir(tmp_path / "train", imgs, labels=labels)
    write_dir(tmp_path / "val", images(5, seed=2), labels=np.arange(5 * B).reshape(5, B))
    shards = [HickleBatchData(tmp_path / "train", r, size, seed=11, val_dir=tmp_path / "val", n_classes=10 ** 4,
                              flip=False) for r in range(size)]
    assert len({s.n_batch_train for s in shards}) == 1
    assert shards[0].n_batch_train == -(-n_files // size)
    for epoch in (0, 1):
        files = []
        for s in shards:
            s.set_epoch(epoch)
        for count in range(shards[0].n_batch_train):
            step = [int(s.train_batch(count)[1][0]) // B for s in shards]
            if n_files >= size:
                assert len(set(step)) == size  # disjoint within a global step
            files += step
        assert set(files) == set(range(n_files))  # complete; only wrap-around padding repeats
        assert len(files) == size * shards[0].n_batch_train
    assert not np.array_equal(shards[0].epoch_order(0), shards[0].epoch_order(1)) or n_files <= 2
    val = [int(s.val_batch(c)[1][0]) // B for s in shards for c in range(s.n_batch_val)]
    assert sorted(val) == list(range(5))  # disjoint and complete


class Foo:
    pass


def test_hickle_file_with_a_pickled_object_is_refused(tmp_path):
    write_dir(tmp_path / "train", images(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hickle's SerializedWarning
        hickle.dump({"data": images(1)[0], "labels": np.zeros(B, np.int64), "extra": Foo()},
                    str(tmp_path / "train" / "1.hkl"))
    d = HickleBatchData(tmp_path / "train", 0, 1, 0, n_classes=10)
    with pytest.raises(UnsafeHickleError, match=r"1\.hkl' carries a pickled Python object at node '/data/\"extra\"'"):
        for count in range(d.n_batch_train):
            d.train_batch(count)
    # a bare pickled object as the whole file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hickle.dump(Foo(), str(tmp_path / "obj.hkl"))
    with pytest.raises(UnsafeHickleError, match="carries a pickled Python object at node '/data'"):
        read_hickle(tmp_path / "obj.hkl")


class Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def replace_type_entry(path, payload: bytes) -> None:
    """Overwrite the type-table entry of the root node (hickle.load would pickle.loads() it)."""
    with h5py.File(path, "a") as f:
        name = f[f["data"].attrs["type"]].name
        base = f[name].attrs["base_type"]
        del f[name]
        f.create_dataset(name, data=np.frombuffer(payload, "S1")[None, :]).attrs["base_type"] = base
        f["data"].attrs["type"] = f[name].ref


def test_malicious_type_table_is_refused_without_running_it(tmp_path):
    path = tmp_path / "evil.hkl"
    hickle.dump(np.zeros((B, C, H, W), np.uint8), str(path))
    marker = tmp_path / "pwned"
    replace_type_entry(path, pickle.dumps(Evil(f"touch '{marker}'")))
    with pytest.raises(UnsafeHickleError, match=r"evil\.hkl': the type of node '/data' is a pickle that runs opcode"):
        read_hickle(path)
    assert not marker.exists()
    # a bare reference to a global that is no plain type is refused too
    replace_type_entry(path, pickle.dumps(os.system))
    with pytest.raises(UnsafeHickleError, match=r"node '/data' has type '(posix|os)\.system'"):
        read_hickle(path)


def test_v3_pickle_node_and_non_numeric_datasets_are_refused(tmp_path):
    with h5py.File(tmp_path / "v3p.hkl", "w") as f:
        f.attrs["CLASS"], f.attrs["VERSION"], f.attrs["PYTHON_VERSION"] = b"hickle", "3.4.9", "2.7.18"
        f.create_dataset("data_0", data=np.array([pickle.dumps(Foo)])).attrs["type"] = [b"pickle"]
    with pytest.raises(UnsafeHickleError, match="carries a pickled Python object at node '/data_0'"):
        read_hickle(tmp_path / "v3p.hkl")
    with h5py.File(tmp_path / "opaque.h5", "w") as f:
        f["data"] = np.void(pickle.dumps(Foo))
    with pytest.raises(UnsafeHickleError, match="holds non-numeric data"):
        read_hickle(tmp_path / "opaque.h5")
    with h5py.File(tmp_path / "ext.h5", "w") as f:
        f["data"] = h5py.ExternalLink(str(tmp_path / "opaque.h5"), "/data")
    with pytest.raises(UnsafeHickleError, match="ExternalLink"):
        read_hickle(tmp_path / "ext.h5")


def test_errors_name_the_path_or_value(tmp_path):
    with pytest.raises(ConfigError, match="train directory '.*nowhere' does not exist"):
        HickleBatchData(tmp_path / "nowhere", 0, 1, 0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no batch files"):
        HickleBatchData(tmp_path / "empty", 0, 1, 0)
    imgs = images(3)
    write_dir(tmp_path / "train", imgs, as_dict=False)
    lab = tmp_path / "train_labels.npy"
    with pytest.raises(ConfigError, match="holds bare images and no labels file was given"):
        HickleBatchData(tmp_path / "train", 0, 1, 0)
    with pytest.raises(ConfigError, match="layout='hwcb' is not allowed; use one of: bchw, chwb"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab, layout="hwcb")
    with pytest.raises(ConfigError, match=r"crop_size=9 is not allowed; use an integer in 1\.\.8"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab, crop_size=9)
    with pytest.raises(ConfigError, match=r"label 9 at index 9 is outside 0\.\.8"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab, n_classes=9)
    np.save(tmp_path / "short.npy", np.zeros(11, np.int64))
    with pytest.raises(ConfigError, match=r"has 11 labels; expected 12 \(3 files x 4 images\)"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=tmp_path / "short.npy")
    np.save(tmp_path / "mean.npy", np.zeros((C, H), np.float32))
    with pytest.raises(ConfigError, match=r"mean file '.*mean.npy' has shape \(3, 8\)"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab, mean_file=tmp_path / "mean.npy")
    with pytest.raises(ConfigError, match="mean file '.*missing.npy' does not exist"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab, mean_file=tmp_path / "missing.npy")
    # a file of another shape, found when its batch is loaded
    hickle.dump(np.zeros((B, C, H, W - 1), np.uint8), str(tmp_path / "train" / "2.hkl"))
    d = HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab, flip=False)
    with pytest.raises(ConfigError, match=r"2\.hkl' holds images of shape \(4, 3, 8, 9\)"):
        for count in range(d.n_batch_train):
            d.train_batch(count)
    hickle.dump(np.zeros((B, C, H), np.uint8), str(tmp_path / "train" / "0.hkl"))
    with pytest.raises(ConfigError, match=r"0\.hkl' holds an array of shape \(4, 3, 8\); expected 4-D"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=lab)


def test_label_errors_in_dict_files(tmp_path):
    labels = np.arange(12).reshape(3, 4) % 10
    labels[2, 1] = 42
    write_dir(tmp_path / "train", images(3), labels=labels)
    d = HickleBatchData(tmp_path / "train", 0, 1, 0, n_classes=10)
    with pytest.raises(ConfigError, match=r"2\.hkl': label 42 at index 1 is outside 0\.\.9"):
        for count in range(d.n_batch_train):
            d.train_batch(count)
    np.save(tmp_path / "l.npy", np.zeros(12, np.int64))
    with pytest.raises(ConfigError, match="labels are given twice"):
        HickleBatchData(tmp_path / "train", 0, 1, 0, train_labels=tmp_path / "l.npy")


def test_natural_file_order_and_mean_file_beside_the_batches(tmp_path):
    labels = np.arange(11 * B).reshape(11, B)
    write_dir(tmp_path / "train", images(11), labels=labels)  # 0.hkl .. 10.hkl
    hickle.dump(np.zeros(C, np.float32), str(tmp_path / "train" / "mean.hkl"))
    d = HickleBatchData(tmp_path / "train", 0, 1, 0, val_dir=tmp_path / "train",
                        mean_file=tmp_path / "train" / "mean.hkl", n_classes=100)
    assert d.n_batch_train == 11 and d.n_batch_val == 11
    assert [int(d.val_batch(c)[1][0]) for c in range(11)] == [k * B for k in range(11)]
