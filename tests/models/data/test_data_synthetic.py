"""Synthetic data: deterministic per seed, learnable, sharded like in-memory arrays."""

import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.models.data.base import ArraySpec, DataClass
from theanompi.models.data.synthetic import SyntheticData


def make(rank=0, size=1, seed=0, **kw):
    args = dict(n_train=200, n_val=100, cache=None)
    args.update(kw)
    shape = args.pop("shape", (3, 4, 4))
    n_classes = args.pop("n_classes", 5)
    batch = args.pop("batch_size", 8)
    return SyntheticData(shape, n_classes, batch, rank, size, seed, **args)


def all_train(d):
    return np.concatenate([d.train_batch(c)[0] for c in range(d.n_batch_train)])


def test_deterministic_per_seed_and_cache_independent():
    a, b, c = make(seed=1), make(seed=1, cache=False), make(seed=2)
    assert isinstance(a.x_train, np.ndarray) and isinstance(b.x_train, ArraySpec)
    assert a.x_train.shape == b.x_train.shape == (200, 3, 4, 4)
    np.testing.assert_array_equal(all_train(a), all_train(b))
    np.testing.assert_array_equal(a.val_batch(3)[0], b.val_batch(3)[0])
    np.testing.assert_array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.y_train, c.y_train)
    assert a.train_batch(0)[0].dtype == np.float32 and a.train_batch(0)[1].dtype == np.int32
    assert make(dtype="float64").train_batch(0)[0].dtype == np.float64


def test_learnable_class_means_differ_and_predict_the_labels():
    d = make(shape=(64,), n_classes=4, n_train=400, n_val=200, seed=3)
    assert set(np.unique(d.y_train)) == set(range(4))
    means = np.stack([d.x_train[d.y_train == k].mean(axis=0) for k in range(4)])
    dist = np.linalg.norm(means[:, None] - means[None], axis=-1)
    assert dist[~np.eye(4, dtype=bool)].min() > 5.0  # class means far apart (noise std 1, 64 dims)
    pred = np.argmin(((d.x_val[:, None] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == d.y_val).mean() > 0.95
    # with no separation there is nothing to learn
    flat = make(shape=(64,), n_classes=4, n_train=400, separation=0.0)
    assert np.abs(flat.class_means).max() == 0.0


@pytest.mark.parametrize("size", [1, 2, 3])
def test_shards_equal_disjoint_complete_and_union_is_the_big_batch(size):
    shards = [make(rank=r, size=size, n_train=50, n_val=13) for r in range(size)]
    one = make(size=1, n_train=50, n_val=13, batch_size=8 * size)
    assert len({s.n_batch_train for s in shards}) == 1 and one.n_batch_train == shards[0].n_batch_train
    for d in shards + [one]:
        d.set_epoch(2)
    seen = []
    for b in range(one.n_batch_train):
        union = np.concatenate([s.train_batch(b)[0] for s in shards])
        np.testing.assert_array_equal(union, one.train_batch(b)[0])
        seen.extend(np.concatenate([s.train_indices(b) for s in shards]))
    assert set(seen) == set(range(50))
    val = np.concatenate([s.val_indices for s in shards])
    np.testing.assert_array_equal(np.sort(val), np.arange(13))
    assert all(isinstance(s, DataClass) for s in shards)


@pytest.mark.parametrize("kw, pattern", [
    (dict(shape=(3, 0)), r"shape=\(3, 0\) is not allowed"),
    (dict(shape=5), r"shape=5 is not allowed"),
    (dict(n_classes=1), r"n_classes=1 is not allowed; use an integer >= 2"),
    (dict(n_train=0), r"n_train=0 is not allowed"),
    (dict(dtype="int32"), r"dtype='int32' is not allowed"),
    (dict(noise=-1.0), r"noise=-1.0 is not allowed"),
    (dict(batch_size=0), r"batch_size=0 must be an integer >= 1"),
    (dict(rank=2, size=2), r"rank 2 is outside 0\.\.1"),
])
def test_bad_arguments(kw, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make(**kw)
