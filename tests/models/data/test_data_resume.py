"""Resuming an epoch inside (DataClass.start_at): the position is the units consumed, whatever the number of ranks
that consumed them, so an epoch continued by another number of ranks loses and repeats nothing."""

from collections import Counter

import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.prefetch import PrefetchData


def shards(size, batch, n=60, seed=5):
    x = np.arange(n, dtype="float32")[:, None]
    y = np.arange(n, dtype="int32")
    return [ShardedArrayData(x, y, x[:6], y[:6], batch_size=batch, rank=r, size=size, seed=seed) for r in range(size)]


def epoch_units(data, epoch, first=0, last=None):
    """The units every rank takes in batches [first, last) of ``epoch``."""
    for d in data:
        if d.epoch != epoch:
            d.set_epoch(epoch)
    last = data[0].n_batch_train if last is None else last
    return [int(u) for b in range(first, last) for d in data for u in d.train_indices(b)]


@pytest.mark.parametrize("before, after, batch_before, batch_after, steps", [
    (3, 2, 4, 6, 2),    # the global batch kept (12): the remaining steps are the uninterrupted run's
    (2, 3, 6, 4, 3),
    (3, 2, 4, 4, 1),    # each worker's batch kept (LR_SCALING=linear): 8 units a step, the last one padded
    (1, 4, 5, 2, 7),
])
def test_an_epoch_continued_by_another_number_of_ranks_sees_every_unit_once(before, after, batch_before,
                                                                              batch_after, steps):
    old, new = shards(before, batch_before), shards(after, batch_after)
    done = epoch_units(old, 1, last=steps)
    consumed = old[0].units_consumed(steps)
    assert consumed == steps * before * batch_before
    for d in new:
        d.start_at(1, consumed)
    rest = epoch_units(new, 1)
    seen = Counter(done + rest[:60 - consumed])
    assert len(seen) == 60 and set(seen.values()) == {1}  # beyond the padding of the last batch
    assert len(rest) == new[0].n_batch_train * after * batch_after and len(rest) - (60 - consumed) < after * \
        batch_after
    if before * batch_before == after * batch_after:  # same global batch: the same batches as uninterrupted
        assert rest == epoch_units(old, 1, first=steps)
    assert new[0].units_consumed(new[0].n_batch_train) == 60
    for d in new:  # the next epoch is whole again
        d.set_epoch(2)
    assert sorted(epoch_units(new, 2)[:60]) == list(range(60)) and new[0].n_batch_train == -(-60 // (after *
                                                                                                      batch_after))


def test_a_resume_position_outside_the_epoch_is_refused():
    with pytest.raises(ConfigError, match="resume position: unit 60 is outside 0..59"):
        shards(2, 3)[0].start_at(0, 60)


def test_the_prefetching_loader_starts_at_the_position_too():
    plain, wrapped = shards(2, 3), shards(2, 3)
    prefetched = PrefetchData(wrapped[0])
    try:
        plain[0].start_at(0, 18)
        prefetched.set_epoch(0)  # prefetches batch 0 of the whole epoch
        prefetched.start_at(0, 18)
        assert prefetched.n_batch_train == plain[0].n_batch_train == 7
        for b in range(7):
            np.testing.assert_array_equal(prefetched.train_batch(b)[1], plain[0].train_batch(b)[1])
    finally:
        prefetched.close()
