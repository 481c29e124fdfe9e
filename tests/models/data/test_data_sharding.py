"""DataClass: the sharding every loader shares (samples or files as units)."""

import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.models.data.base import ArraySpec, DataClass, ShardedArrayData, check_shard_args


class Units(DataClass):
    def __init__(self, n_train, n_val, per_batch, rank, size, seed=4):
        self.setup_shards(n_train, n_val, per_batch, rank, size, seed, unit="files_per_batch")

    def load_train(self, units, count):
        return units, count

    def load_val(self, units, count):
        return units, count


@pytest.mark.parametrize("n, per_batch, size", [(7, 1, 3), (10, 2, 2), (3, 1, 5), (9, 3, 1)])
def test_units_equal_disjoint_complete(n, per_batch, size):
    shards = [Units(n, 5, per_batch, r, size) for r in range(size)]
    assert len({s.n_batch_train for s in shards}) == 1
    for epoch in (0, 3):
        for s in shards:
            s.set_epoch(epoch)
        seen = []
        for b in range(shards[0].n_batch_train):
            step = np.concatenate([s.train_batch(b)[0] for s in shards])
            assert len(step) == size * per_batch
            if n >= size * per_batch:
                assert len(set(step)) == len(step)
            seen.extend(step)
        assert set(seen) == set(range(n))
    val = np.concatenate([s.val_batch(c)[0] for s in shards for c in range(s.n_batch_val)])
    np.testing.assert_array_equal(np.sort(val), np.arange(5))


def test_common_shuffle_per_epoch_and_slots():
    a, b = Units(11, 0, 1, 0, 2), Units(11, 0, 1, 1, 2)
    np.testing.assert_array_equal(a.epoch_order(2), b.epoch_order(2))
    assert not np.array_equal(a.epoch_order(2), a.epoch_order(3))
    assert a.train_slot(1) == 2 and b.train_slot(1) == 3
    a.set_epoch(7)
    assert a.epoch == 7


def test_sharded_array_data_is_a_data_class_with_unchanged_attributes():
    x = np.arange(10, dtype="float32")[:, None]
    d = ShardedArrayData(x, x[:, 0].astype("int32"), x, x[:, 0].astype("int32"), 3, 1, 2, 0)
    assert isinstance(d, DataClass) and d.global_batch == 6 and d.batch_size == 3
    assert d.input_shape == (1,)
    with d:
        pass


def test_argument_errors_quote_the_value():
    with pytest.raises(ConfigError, match=r"files_per_batch=0 must be an integer >= 1"):
        Units(3, 0, 0, 0, 1)
    with pytest.raises(ConfigError, match=r"size=0 \(number of workers\)"):
        check_shard_args(1, 0, 0)
    with pytest.raises(ConfigError, match=r"seed=-1 must be an integer >= 0"):
        Units(3, 0, 1, 0, 1, seed=-1)
    with pytest.raises(ConfigError, match="training set is empty"):
        Units(0, 0, 1, 0, 1)
    assert repr(ArraySpec((2, 3), "uint8")) == "ArraySpec(shape=(2, 3), dtype=uint8)"
