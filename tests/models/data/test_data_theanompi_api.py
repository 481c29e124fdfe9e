"""Theano-MPI's DataClass API (Cifar10_data, ImageNet_data, MNIST_data, utils) on theanompi's loaders.

(Real ranks sharding these files under mpiexec: tests/sessions/test_data_ranks.py.)"""

import gzip
import io
import os
import pickle
import subprocess
import sys

import hickle
import numpy as np
import pytest
from conftest import ASSETS, ROOT

sys.path.insert(0, str(ASSETS))
from cifar_format import Py2Pickler
from data_api_files import cifar_bytes, write_cifar, write_mnist_npz

from theanompi.core.errors import ConfigError
from theanompi.core.safe_load import UnsafeFileError, load_hickle
from theanompi.models.contract import WorkerConfig
from theanompi.models.current_config import set_current
from theanompi.models.data import Cifar10_data, ImageNet_data
from theanompi.models.data.mnist import MNIST_data
from theanompi.models.data.utils import crop_and_mirror, unpickle


@pytest.fixture(autouse=True)
def no_session_left_over():
    set_current(None)
    yield
    set_current(None)


def session(data_dir=None, rank=0, size=1, seed=0):
    opts = {} if data_dir is None else {"data_dir": str(data_dir)}
    set_current(WorkerConfig(rank=rank, size=size, seed=seed, device="cpu", model_options=opts))


# ----- CIFAR-10 -----------------------------------------------------------------------------
def cifar(root, rank=0, size=1, seed=0, file_batch_size=4, common_seed=1234):
    """Cifar10_data driven exactly as Theano-MPI's Cifar10_model constructor drives it."""
    session(root, rank, size, seed)
    d = Cifar10_data(verbose=False)
    d.batch_data(file_batch_size)
    d.extend_data(rank=rank, size=size)
    d.shuffle_data(mode="train", common_seed=common_seed)
    d.shuffle_data(mode="val")
    d.shard_data(mode="train", rank=rank, size=size)
    d.shard_data(mode="val", rank=rank, size=size)
    return d


def batch_ids(d, batches):
    """Positions in d.train_img (or val_img) of the given file batches (identified by their memory)."""
    ids = []
    for b in batches:
        pool = d.train_img if any(b is t for t in d.train_img) else d.val_img
        ids.append(next(i for i, t in enumerate(pool) if t is b))
    return ids


@pytest.mark.parametrize("flavour", ["py2", "py3-2", "py3-3", "py3-4"])
def test_cifar_reads_both_pickle_flavours_and_splits_80_20(tmp_path, flavour):
    x, y = write_cifar(tmp_path, flavour)
    session(tmp_path, seed=3)
    d = Cifar10_data(verbose=False)
    assert (d.channels, d.width, d.height, d.n_class, d.para_load) == (3, 32, 32, 10, False)
    xt, yt, xv, yv, mean = d.rawdata
    assert xt.shape == (32, 3, 32, 32) and xv.shape == (8, 3, 32, 32) and xt.dtype == np.uint8
    assert yt.dtype == np.int32 and yt.shape == (32,) and yv.shape == (8,)
    assert mean.shape == (3, 32, 32, 1) and mean.dtype == np.float32
    np.testing.assert_allclose(mean[..., 0], xt.astype(np.float64).mean(axis=0), rtol=1e-6)
    # the split is a partition of the 40 written images, each with its own label
    written = {x[i].tobytes(): int(y[i]) for i in range(len(x))}
    held = [(a.tobytes(), int(b)) for a, b in zip(np.concatenate([xt, xv]), np.concatenate([yt, yv]))]
    assert len({k for k, _ in held}) == 40 and all(written[k] == label for k, label in held)


def test_cifar_split_is_seeded_by_the_session_and_equal_on_every_rank(tmp_path):
    write_cifar(tmp_path)
    splits = []
    for rank, size, seed in [(0, 3, 0), (2, 3, 0), (0, 1, 0), (0, 3, 1)]:
        session(tmp_path, rank, size, seed)
        splits.append(Cifar10_data(verbose=False).rawdata[2])
    assert all(np.array_equal(splits[0], s) for s in splits[1:3])
    assert not np.array_equal(splits[0], splits[3])


def test_cifar_file_batches_as_the_model_uses_them(tmp_path):
    write_cifar(tmp_path)
    d = cifar(tmp_path, file_batch_size=4)
    assert len(d.train_img) == 8 and len(d.val_img) == 2 and d.n_batch_train == 8 and d.n_batch_val == 2
    for img, labels in zip(d.train_img_shard, d.train_labels_shard):
        assert img.shape == (4, 3, 32, 32) and img.dtype == np.uint8 and labels.shape == (4,)
    arr = np.rollaxis(d.train_img_shard[0], 0, 4)  # what Theano-MPI's Cifar10_model does: c01b
    assert arr.shape == (3, 32, 32, 4)
    k = batch_ids(d, d.train_img_shard[:1])[0]
    np.testing.assert_array_equal(d.train_img_shard[0], d.rawdata[0][4 * k:4 * k + 4])
    np.testing.assert_array_equal(d.train_labels_shard[0], d.rawdata[1][4 * k:4 * k + 4])
    # the project's spelling of the same batch
    xb, yb = d.train_batch(0)
    assert xb is d.train_img_shard[0] and yb is d.train_labels_shard[0]
    assert d.val_batch(1)[0] is d.val_img_shard[1]
    # file batch size 5: 32 // 5 = 6 full batches (remainder dropped), 8 // 5 = 1
    d5 = cifar(tmp_path, file_batch_size=5)
    assert len(d5.train_img) == 6 and len(d5.val_img) == 1


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_get_disjoint_shards_covering_the_data_with_equal_counts(tmp_path, size):
    write_cifar(tmp_path)
    shards = [cifar(tmp_path, rank, size) for rank in range(size)]
    n_files = len(shards[0].train_img)  # 8
    expected = -(-n_files // size)
    assert [s.n_batch_train for s in shards] == [expected] * size
    assert all(len(s.train_img_ext) == expected * size for s in shards)
    # extend_data pads by wrapping: the list, then its first batches again
    assert batch_ids(shards[0], shards[0].train_img_ext) == list(np.resize(np.arange(n_files), expected * size))
    for common_seed in (1234, 0, 5):
        for s in shards:
            s.shuffle_data("train", common_seed=common_seed)
            s.shard_data("train", s.rank, size)
        ids = [batch_ids(s, s.train_img_shard) for s in shards]
        flat = [i for r in ids for i in r]
        assert set(flat) == set(range(n_files)) and len(flat) == expected * size
        assert len(flat) - len(set(flat)) == expected * size - n_files  # only the padding repeats
        for s, r in zip(shards, ids):  # labels follow their images
            assert all(lab is s.train_labels[i] for lab, i in zip(s.train_labels_shard, r))
        # every rank's common order is the same
        orders = [batch_ids(s, s.train_img_shuffle) for s in shards]
        assert all(o == orders[0] for o in orders)
    val = [batch_ids(s, s.val_img_shard) for s in shards]
    flat = [i for r in val for i in r]
    assert sorted(flat) == list(range(len(shards[0].val_img)))  # disjoint, complete, not padded
    assert [s.n_batch_val for s in shards] == [len(r) for r in val]


def test_common_seed_decides_the_order(tmp_path):
    write_cifar(tmp_path)
    d = cifar(tmp_path, rank=0, size=2)
    e = cifar(tmp_path, rank=1, size=2)  # another rank, another process: constructed afresh

    def order(data, common_seed):
        data.shuffle_data("train", common_seed=common_seed)
        data.shard_data("train", data.rank, data.size)
        return batch_ids(data, data.train_img_shuffle)

    assert order(d, 7) == order(e, 7) and order(d, 1234) == order(e, 1234)
    assert order(d, 7) != order(d, 8)
    assert sorted(order(d, 7)[:8]) == list(range(8))
    other_session = cifar(tmp_path, rank=0, size=2, seed=1)
    assert order(other_session, 7) != order(d, 7)


def test_set_epoch_and_the_models_own_calls_agree(tmp_path):
    write_cifar(tmp_path)
    d = cifar(tmp_path, rank=1, size=3)
    d.set_epoch(4)  # the session, at the epoch start
    by_session = batch_ids(d, d.train_img_shard)
    assert batch_ids(d, [d.train_batch(c)[0] for c in range(d.n_batch_train)]) == by_session
    d.shuffle_data(mode="train", common_seed=4)  # the model's own calls, same epoch: no change
    d.shard_data(mode="train", rank=1, size=3)
    assert batch_ids(d, d.train_img_shard) == by_session and d.n_batch_train == 3
    d.set_epoch(5)
    assert batch_ids(d, d.train_img_shard) != by_session
    # set_epoch before batch_data is kept for it
    session(tmp_path, 1, 3)
    early = Cifar10_data()
    early.set_epoch(4)
    early.batch_data(4)
    assert batch_ids(early, early.train_img_shard) == by_session


def test_rank_and_size_given_to_the_calls_win_over_the_sessions(tmp_path):
    write_cifar(tmp_path)
    session(tmp_path, 0, 1)
    d = Cifar10_data()
    d.batch_data(4)
    assert (d.rank, d.size, d.n_batch_train) == (0, 1, 8)
    d.extend_data(rank=1, size=3)
    d.shuffle_data("train", common_seed=6)
    d.shard_data("train", rank=1, size=3)
    assert (d.rank, d.size, d.n_batch_train, len(d.train_img_ext)) == (1, 3, 3, 9)
    fresh = cifar(tmp_path, 1, 3, common_seed=6)  # constructed in a session of 3
    assert batch_ids(d, d.train_img_shard) == batch_ids(fresh, fresh.train_img_shard)


def test_old_module_paths():
    import theanompi.models.data as package
    import theanompi.models.data.cifar10 as cifar10
    import theanompi.models.data.imagenet as imagenet

    assert package.Cifar10_data is cifar10.Cifar10_data is Cifar10_data
    assert package.ImageNet_data is imagenet.ImageNet_data and package.MNIST_data is MNIST_data
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'Nope_data'"):
        _ = package.Nope_data


def test_cifar_config_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"Cifar10_data finds its data in MODEL_DATA_DIR, but no theanompi "
                                          r"session .*model_options=\{'data_dir': \.\.\.\}"):
        Cifar10_data()
    session(None)
    with pytest.raises(ConfigError, match=r"set MODEL_DATA_DIR=<dir> in the session's cfg \(or model_options="):
        Cifar10_data()
    session(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"MODEL_DATA_DIR='.*nowhere' is not a directory"):
        Cifar10_data()
    write_cifar(tmp_path)
    (tmp_path / "data_batch_3").unlink()
    session(tmp_path)
    with pytest.raises(ConfigError, match=r"CIFAR-10 file '.*data_batch_3' is missing \(expected data_batch_1..5\)"):
        Cifar10_data()
    (tmp_path / "data_batch_3").write_bytes(cifar_bytes(np.zeros((2, 100), np.uint8), [0, 1], "py2"))
    with pytest.raises(ConfigError, match=r"'.*data_batch_3': data has shape \(2, 100\) and dtype uint8"):
        Cifar10_data()
    write_cifar(tmp_path)
    d = Cifar10_data()
    with pytest.raises(ConfigError, match=r"extend_data needs the file batches: call batch_data"):
        d.extend_data(0, 1)
    for bad, pattern in [(0, r"file_batch_size=0 is not allowed"), (33, r"file_batch_size=33 is larger than the 32"),
                         ("4", r"file_batch_size='4' is not allowed")]:
        with pytest.raises(ConfigError, match=pattern):
            d.batch_data(bad)
    d.batch_data(4)
    with pytest.raises(ConfigError, match=r"already cut into file batches of 4"):
        d.batch_data(8)
    with pytest.raises(ConfigError, match=r"mode='test' is not allowed"):
        d.shuffle_data(mode="test")
    with pytest.raises(ConfigError, match=r"common_seed=-1 is not allowed"):
        d.shuffle_data(mode="train", common_seed=-1)
    with pytest.raises(ConfigError, match=r"rank 2 is outside 0..1"):
        d.shard_data("train", 2, 2)


def test_cifar_evil_pickle_is_refused(tmp_path):
    write_cifar(tmp_path)

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch '{tmp_path / 'pwned'}'",))

    (tmp_path / "data_batch_2").write_bytes(pickle.dumps({"data": Evil(), "labels": [0]}, protocol=2))
    session(tmp_path)
    with pytest.raises(UnsafeFileError, match=r"data_batch_2'.*'(posix|nt)\.system'"):
        Cifar10_data()
    with pytest.raises(UnsafeFileError, match=r"'(posix|nt)\.system'"):
        unpickle(tmp_path / "data_batch_2")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("flavour", ["py2", "py3-4"])
def test_unpickle_gives_str_keys(tmp_path, flavour):
    x, y = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072), [3, 4]
    (tmp_path / "b").write_bytes(cifar_bytes(x, y, flavour))
    d = unpickle(tmp_path / "b")
    assert sorted(d) == ["batch_label", "data", "filenames", "labels"]
    np.testing.assert_array_equal(d["data"], x)
    assert [int(v) for v in d["labels"]] == y
    with pytest.raises(ConfigError, match=r"CIFAR-10 file '.*missing' is missing"):
        unpickle(tmp_path / "missing")


# ----- ImageNet (hickle) ----------------------------------------------------------------------
C, H, W, B = 3, 10, 12, 4


def write_imagenet(root, n_train=5, n_val=2, seed=0):
    """Theano-MPI's layout: c01b uint8 files, labels/*.npy, misc/img_mean.npy."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("val", n_val)):
        d = root / f"{split}_hkl_b{B}"
        d.mkdir(parents=True)
        imgs = rng.integers(0, 256, (n, C, H, W, B), dtype=np.uint8)
        for k in range(n):
            hickle.dump(imgs[k], str(d / f"{k:04d}.hkl"))
        labels = rng.integers(0, 1000, n * B)
        (root / "labels").mkdir(exist_ok=True)
        np.save(root / "labels" / f"{split}_labels.npy", labels)
        out[split] = (imgs, labels)
    (root / "misc").mkdir()
    mean = rng.random((C, H, W)).astype(np.float32) * 255
    np.save(root / "misc" / "img_mean.npy", mean)
    return out, mean


def imagenet(root, rank=0, size=1, seed=0, common_seed=1234):
    session(root, rank, size, seed)
    d = ImageNet_data(verbose=False)
    d.batch_data(B)
    d.extend_data(rank=rank, size=size)
    d.shuffle_data(mode="train", common_seed=common_seed)
    d.shuffle_data(mode="val")
    d.shard_data(mode="train", rank=rank, size=size)
    d.shard_data(mode="val", rank=rank, size=size)
    return d


def test_imagenet_rawdata_and_file_name_shards(tmp_path):
    written, mean = write_imagenet(tmp_path)
    shards = [imagenet(tmp_path, r, 2) for r in range(2)]
    d = shards[0]
    assert (d.channels, d.height, d.width, d.n_class, d.para_load, d.batch_size) == (3, H, W, 1000, False, B)
    train_names, train_labels, val_names, val_labels, img_mean, img_std = d.rawdata
    assert [os.path.basename(n) for n in train_names] == [f"{k:04d}.hkl" for k in range(5)]
    assert all(isinstance(n, str) for n in train_names + val_names) and len(val_names) == 2
    np.testing.assert_array_equal(train_labels, written["train"][1])
    assert train_labels.dtype == np.int32 and val_labels.shape == (8,)
    assert img_mean.shape == (C, H, W, 1) and img_mean.dtype == np.float32
    np.testing.assert_array_equal(img_mean[..., 0], mean)
    np.testing.assert_allclose(img_std.ravel(), [0.229, 0.224, 0.225], rtol=1e-6)
    assert img_std.shape == (3, 1, 1, 1)
    # 5 files over 2 ranks: padded to 6, 3 each; the union covers all files
    assert [s.n_batch_train for s in shards] == [3, 3]
    names = [n for s in shards for n in s.train_img_shard]
    assert set(names) == set(train_names) and len(names) == 6
    assert sorted(n for s in shards for n in s.val_img_shard) == sorted(val_names)
    # what VGG16 does with a shard entry: hkl.load the file, subtract the mean, scale, crop
    for s in shards:
        for name, labels in zip(s.train_img_shard, s.train_labels_shard):
            k = train_names.index(name)
            np.testing.assert_array_equal(labels, written["train"][1][k * B:(k + 1) * B])
            np.testing.assert_array_equal(load_hickle(name), hickle.load(name))  # the safe reader, for ports
            arr = (hickle.load(name) - s.rawdata[4]) / 255. / s.rawdata[5]
            out = crop_and_mirror(arr, "val", True, True, 8)
            ref = (written["train"][0][k].astype(np.float64) - mean[..., None]) / 255. / img_std
            np.testing.assert_allclose(out, ref[:, 1:9, 2:10, :], rtol=1e-5)
    # the project's spelling: the mean-subtracted BCHW batch of the same file
    xb, yb = d.train_batch(0)
    k = train_names.index(d.train_img_shard[0])
    ref = written["train"][0][k].transpose(3, 0, 1, 2).astype(np.float32) - mean
    np.testing.assert_allclose(xb, ref, rtol=1e-6)
    np.testing.assert_array_equal(yb, d.train_labels_shard[0])


def test_imagenet_same_common_seed_same_order(tmp_path):
    write_imagenet(tmp_path, n_train=7)
    a, b = imagenet(tmp_path, 0, 3, common_seed=2), imagenet(tmp_path, 2, 3, common_seed=2)
    assert a.train_img_shuffle == b.train_img_shuffle
    c = imagenet(tmp_path, 0, 3, common_seed=3)
    assert c.train_img_shuffle != a.train_img_shuffle
    shards = [imagenet(tmp_path, r, 3, common_seed=2).train_img_shard for r in range(3)]
    assert set(n for s in shards for n in s) == set(a.train_img) and all(len(s) == 3 for s in shards)


def test_imagenet_config_errors(tmp_path):
    session(tmp_path)
    with pytest.raises(ConfigError, match=r"has no train_hkl\*/ folder of hickle batch files"):
        ImageNet_data()
    write_imagenet(tmp_path)
    d = ImageNet_data()
    with pytest.raises(ConfigError, match=r"file_batch_size=8 but the files in '.*train_hkl_b4' hold 4 images"):
        d.batch_data(8)
    (tmp_path / "labels" / "val_labels.npy").unlink()
    with pytest.raises(ConfigError, match=r"validation labels file '.*labels/val_labels.npy' is missing"):
        ImageNet_data()
    np.save(tmp_path / "labels" / "val_labels.npy", np.arange(5))
    with pytest.raises(ConfigError, match=r"val labels file '.*val_labels.npy' has 5 labels; expected 8"):
        ImageNet_data()
    np.save(tmp_path / "labels" / "val_labels.npy", np.arange(8))
    (tmp_path / "misc" / "img_mean.npy").unlink()
    with pytest.raises(ConfigError, match=r"mean image file '.*misc/img_mean.npy' is missing"):
        ImageNet_data()
    np.save(tmp_path / "misc" / "img_mean.npy", np.zeros((3, 5, 5)))
    with pytest.raises(ConfigError, match=r"mean file '.*img_mean.npy' has shape \(3, 5, 5\)"):
        ImageNet_data()
    (tmp_path / "train_hkl_b8").mkdir()
    with pytest.raises(ConfigError, match=r"several train folders \(train_hkl_b4, train_hkl_b8\)"):
        ImageNet_data()


# ----- MNIST ------------------------------------------------------------------------------------
def py2_pickle(obj) -> bytes:
    """What Python 2's cPickle wrote for deeplearning.net's mnist.pkl.gz (memo off: arrays share dtype strings)."""
    buf = io.BytesIO()
    pickler = Py2Pickler(buf, protocol=2)
    pickler.fast = True
    pickler.dump(obj)
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def mnist(root, rank=0, size=1, seed=0, batchsize=8):
    session(root, rank, size, seed)
    d = MNIST_data(verbose=False)
    d.batch_data(batchsize)
    return d


def test_mnist_npz_batches_sharded_endless_and_seeded(tmp_path):
    xt, yt, xv, yv = write_mnist_npz(tmp_path)
    shards = [mnist(tmp_path, r, 2) for r in range(2)]
    d = shards[0]
    assert (d.channels, d.width, d.height, d.n_class) == (1, 28, 28, 10)
    assert d.rawdata[0].shape == (50, 784) and d.rawdata[4].shape == (1, 784)
    np.testing.assert_allclose(d.rawdata[4][0], (xt.mean(axis=0) + xv.mean(axis=0)) / 2, rtol=1e-5)
    assert [s.n_batch_train for s in shards] == [4, 4]  # 50 images over 2 ranks x 8: padded to 64
    assert [s.n_batch_val for s in shards] == [2, 2]  # 10 validation images each: 8 + 2
    seen = []
    for s in shards:
        for _ in range(s.n_batch_train):
            inputs, targets = next(s.batches_train)
            assert inputs.shape == (8, 1, 28, 28) and inputs.dtype == np.float32 and targets.dtype == np.int32
            rows = [int(np.flatnonzero((xt == row.reshape(784)).all(axis=1))[0]) for row in inputs]
            np.testing.assert_array_equal(targets, yt[rows])
            seen.extend(rows)
    assert set(seen) == set(range(50)) and len(seen) == 64  # disjoint but for the 14 padding repeats
    # endless: a second pass in another order; the same session seed gives the same stream
    again = mnist(tmp_path, 0, 2)
    first = [next(again.batches_train)[1] for _ in range(8)]
    other = mnist(tmp_path, 0, 2, seed=1)
    assert not all(np.array_equal(a, b) for a, b in zip(first, [next(other.batches_train)[1] for _ in range(8)]))
    replay = mnist(tmp_path, 0, 2)
    assert all(np.array_equal(a, next(replay.batches_train)[1]) for a in first)
    assert not np.array_equal(np.concatenate(first[:4]), np.concatenate(first[4:]))
    vals = [next(d.batches_val) for _ in range(3)]
    assert [v[0].shape[0] for v in vals] == [8, 2, 8]
    np.testing.assert_allclose(vals[0][0].reshape(8, 784), xv[:8])
    d.shuffle_data(), d.shard_data()  # Theano-MPI's no-ops
    # the project's spelling: set_epoch selects the same common shuffle for train_batch (also before batch_data)
    session(tmp_path, 1, 2)
    early = MNIST_data()
    early.set_epoch(2)
    early.batch_data(8)
    shards[1].set_epoch(2)
    np.testing.assert_array_equal(early.train_batch(3)[1], shards[1].train_batch(3)[1])
    np.testing.assert_array_equal(early.train_indices(3), early.epoch_order(2)[3 * 16 + 8:3 * 16 + 16])


def test_mnist_keras_npz_and_pickle(tmp_path):
    xt, yt, xv, yv = write_mnist_npz(tmp_path, uint8=True, val_key="test")
    d = mnist(tmp_path, batchsize=10)
    np.testing.assert_allclose(d.rawdata[2].reshape(-1, 28, 28), xv / 255.0, rtol=1e-6)
    assert d.n_batch_val == 2
    (tmp_path / "mnist.npz").unlink()
    sets = tuple((np.random.default_rng(i).random((n, 784), dtype=np.float32), np.arange(n) % 10)
                 for i, n in enumerate((30, 10, 10)))
    for _protocol, raw in (("py2", py2_pickle(sets)), ("py3", pickle.dumps(sets, protocol=2))):
        with gzip.open(tmp_path / "mnist.pkl.gz", "wb") as f:
            f.write(raw)
        d = mnist(tmp_path, batchsize=10)
        np.testing.assert_array_equal(d.rawdata[0], sets[0][0])
        np.testing.assert_array_equal(d.rawdata[6], sets[2][1])  # test labels, as Theano-MPI's rawdata[6]
        assert d.n_batch_train == 3 and next(d.batches_train)[0].shape == (10, 1, 28, 28)


def test_mnist_errors(tmp_path):
    session(tmp_path)
    with pytest.raises(ConfigError, match=r"MNIST directory '.*' holds neither mnist.npz nor mnist.pkl.gz"):
        MNIST_data()

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch '{tmp_path / 'pwned'}'",))

    with gzip.open(tmp_path / "mnist.pkl.gz", "wb") as f:
        f.write(pickle.dumps(((Evil(), [0]), (np.zeros((1, 784)), [0])), protocol=2))
    with pytest.raises(UnsafeFileError, match=r"mnist.pkl.gz'.*system"):
        MNIST_data()
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "mnist.pkl.gz").write_bytes(b"not gzip")
    with pytest.raises(ConfigError, match=r"mnist.pkl.gz' is not a readable gzipped pickle"):
        MNIST_data()
    np.savez(tmp_path / "mnist.npz", x_train=np.zeros((4, 30)), y_train=np.zeros(4, int), x_val=np.zeros((2, 784)),
             y_val=np.zeros(2, int))
    with pytest.raises(ConfigError, match=r"mnist.npz' \(train\): images of shape \(4, 30\)"):
        MNIST_data()
    np.savez(tmp_path / "mnist.npz", x_train=np.zeros((4, 784)), y_train=np.zeros(4, int))
    with pytest.raises(ConfigError, match=r"has no x_val/y_val \(keys: \['x_train', 'y_train'\]\)"):
        MNIST_data()
    np.savez(tmp_path / "mnist.npz", x_train=np.zeros((4, 784)), y_train=np.array([0, 1, 2, 10]),
             x_val=np.zeros((2, 784)), y_val=np.zeros(2, int))
    with pytest.raises(ConfigError, match=r"\(train\): label 10 at index 3 is outside 0..9"):
        MNIST_data()
    np.savez(tmp_path / "mnist.npz", x_train=np.zeros((4, 784)), y_train=np.zeros(4, int), x_val=np.zeros((1, 784)),
             y_val=np.zeros(1, int))
    session(tmp_path, rank=1, size=2)
    d = MNIST_data()
    with pytest.raises(ConfigError, match=r"batch_size=0 must be an integer >= 1"):
        d.batch_data(0)
    d.batch_data(2)
    with pytest.raises(ConfigError, match=r"rank 1 has no validation images \(1 over 2 ranks\)"):
        next(d.batches_val)


# ----- crop_and_mirror ---------------------------------------------------------------------------
def all_crops(image, size):
    """{(y, x, mirrored): crop} of a (C, H, W) image."""
    _, h, w = image.shape
    out = {}
    for y in range(h - size + 1):
        for x in range(w - size + 1):
            crop = image[:, y:y + size, x:x + size]
            out[(y, x, False)], out[(y, x, True)] = crop, crop[:, :, ::-1]
    return out


def which_crop(crop, image, size):
    return [k for k, v in all_crops(image, size).items() if np.array_equal(v, crop)]


def c01b(seed=0, c=2, h=6, w=7, b=5):
    return np.random.default_rng(seed).permutation(c * h * w * b).reshape(c, h, w, b).astype(np.float64)


def test_crop_and_mirror_centre_for_val_and_without_rand_crop():
    data = c01b()
    for mode, rand in (("val", True), ("val", False), ("train", False)):
        for flag_batch in (True, False):
            out = crop_and_mirror(data, mode, rand, flag_batch, cropsize=4)
            assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
            np.testing.assert_array_equal(out, data[:, 1:5, 1:5, :].astype(np.float32))


def test_crop_and_mirror_random_whole_batch_and_per_image():
    data = c01b()
    rng = np.random.default_rng(0)
    found = set()
    for _ in range(300):
        out = crop_and_mirror(data, "train", True, True, cropsize=4, rng=rng)
        keys = {tuple(which_crop(out[..., i], data[..., i], 4)) for i in range(data.shape[3])}
        assert len(keys) == 1 and len(next(iter(keys))) == 1  # one crop and mirror for the whole batch
        found.add(next(iter(keys))[0])
    assert found == set(all_crops(data[..., 0], 4))  # 3 x 4 positions x 2 mirrors, all reached
    per_image = set()
    for _ in range(20):
        out = crop_and_mirror(data, "train", True, False, cropsize=4, rng=rng)
        keys = [which_crop(out[..., i], data[..., i], 4) for i in range(data.shape[3])]
        assert all(len(k) == 1 for k in keys)
        per_image.add(len({k[0] for k in keys}) > 1)
    assert True in per_image  # images of one batch are cropped differently


def test_crop_and_mirror_session_rng_is_seeded():
    data = c01b()
    with pytest.raises(ConfigError, match=r"random crop_and_mirror draws from the session's SEED.*rng="):
        crop_and_mirror(data, "train", True, cropsize=4)

    def run(seed, rank=0):
        set_current(WorkerConfig(rank=rank, size=2, seed=seed, device="cpu"))
        return [crop_and_mirror(data, "train", True, False, cropsize=3) for _ in range(4)]

    a, b, c = run(1), run(1), run(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert not all(np.array_equal(x, y) for x, y in zip(a[:1], a[1:2]))  # the stream goes on between calls


def test_crop_and_mirror_bad_input():
    with pytest.raises(ConfigError, match=r"data of shape \(3, 8, 8\); expected a c01b batch"):
        crop_and_mirror(np.zeros((3, 8, 8)), "val", False)
    with pytest.raises(ConfigError, match=r"cropsize=9 is not allowed for 8x10 images; use an integer in 1..8"):
        crop_and_mirror(np.zeros((3, 8, 10, 2)), "val", False, cropsize=9)
    with pytest.raises(ConfigError, match=r"mode='test' is not allowed"):
        crop_and_mirror(np.zeros((3, 8, 8, 2)), "test", False, cropsize=4)


def test_importing_the_package_is_cheap():
    code = ("import sys, theanompi.models.data as d; d.Cifar10_data; d.ImageNet_data; d.MNIST_data; "
            "import theanompi.models.data.utils; "
            "print(sorted(m for m in ('pytensor', 'h5py', 'hickle', 'sklearn') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
