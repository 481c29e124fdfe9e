import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.digits import load_digits_split


def make(rank, size, batch=4, n=23, n_val=10, seed=3):
    x = np.arange(n, dtype="float32")[:, None]
    y = np.arange(n, dtype="int32")
    xv = np.arange(n_val, dtype="float32")[:, None]
    yv = np.arange(n_val, dtype="int32")
    return ShardedArrayData(x, y, xv, yv, batch_size=batch, rank=rank, size=size, seed=seed)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_train_shards_equal_complete_and_disjoint_per_global_batch(size):
    shards = [make(r, size) for r in range(size)]
    assert len({s.n_batch_train for s in shards}) == 1
    for epoch in (0, 1):
        seen = []
        for s in shards:
            s.set_epoch(epoch)
        for b in range(shards[0].n_batch_train):
            batches = [s.train_indices(b) for s in shards]
            assert all(len(x) == 4 for x in batches)
            seen.extend(np.concatenate(batches))
        # every sample is seen; only wrap-around padding repeats
        assert set(seen) == set(range(23))
        assert len(seen) == shards[0].n_batch_train * size * 4


def test_union_of_rank_batches_equals_single_process_big_batch():
    two = [make(r, 2, batch=4) for r in range(2)]
    one = make(0, 1, batch=8)
    for d in two + [one]:
        d.set_epoch(5)
    assert one.n_batch_train == two[0].n_batch_train
    for b in range(one.n_batch_train):
        union = np.concatenate([d.train_batch(b)[1] for d in two])
        np.testing.assert_array_equal(union, one.train_batch(b)[1])


def test_epochs_shuffle_differently_but_identically_across_ranks():
    a, b = make(0, 2), make(1, 2)
    np.testing.assert_array_equal(a.epoch_order(1), b.epoch_order(1))
    assert not np.array_equal(a.epoch_order(1), a.epoch_order(2))


def test_val_shards_disjoint_and_complete():
    shards = [make(r, 3) for r in range(3)]
    got = np.concatenate([s.val_batch(c)[1] for s in shards for c in range(s.n_batch_val)])
    np.testing.assert_array_equal(np.sort(got), np.arange(10))


def test_bad_inputs():
    with pytest.raises(ConfigError, match="batch_size=0"):
        make(0, 1, batch=0)
    x = np.zeros((3, 1), "float32")
    with pytest.raises(ConfigError, match="3 inputs but 2 labels"):
        ShardedArrayData(x, np.zeros(2, "int32"), x, np.zeros(3, "int32"), 1, 0, 1, 0)
    with pytest.raises(IndexError):
        make(0, 1).train_batch(99)


def test_digits_split_is_real_and_fixed():
    (xt, yt), (xv, yv) = load_digits_split()
    assert xt.shape == (1500, 64) and xv.shape == (297, 64)
    assert 0.0 <= xt.min() and xt.max() <= 1.0
    assert set(np.unique(yt)) == set(range(10))
    (xt2, _), _ = load_digits_split()
    np.testing.assert_array_equal(xt, xt2)


def test_digits_read_without_sklearn_equal_sklearns_own_loader():
    """The digits come from scikit-learn's file through numpy (importing sklearn costs each rank ~1.6 s)."""
    from sklearn.datasets import load_digits

    from theanompi.models.data.digits import digits_file, load_digits_arrays

    assert digits_file() is not None  # else the fallback (sklearn's loader) would be what this compares
    pixels, labels = load_digits_arrays()
    reference = load_digits()
    np.testing.assert_array_equal(pixels, reference.data)
    np.testing.assert_array_equal(labels, reference.target)


def test_loading_the_digits_does_not_import_sklearn():
    from test_light_imports import modules_loaded_by

    statement = "from theanompi.models.data.digits import load_digits_split; load_digits_split()"
    assert modules_loaded_by(statement, ("sklearn", "scipy")) == []


def test_a_batch_larger_than_the_workers_share_is_named_once(caplog):
    """Every epoch would be one step that wraps around the data: rank 0 says so (the other ranks stay quiet)."""
    with caplog.at_level("WARNING", logger="theanompi"):
        shards = [make(n=10, batch=8, rank=rank, size=2) for rank in (0, 1)]
    assert shards[0].n_batch_train == 1
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == ("batch_size=8 on 2 workers takes 16 units per step, but the training set has 10: every epoch is "
                    "one step that wraps around the data (use batch_size <= 5)")
