"""PrefetchData: same batches as direct loading, real overlap, exceptions, clean shutdown."""

import gc
import threading
import time

import numpy as np
import pytest

from theanompi.models.data.base import DataClass
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.data.synthetic import SyntheticData


def synthetic(**kw):
    return SyntheticData((3, 4, 4), 5, 4, 0, 1, 0, n_train=30, n_val=10, **kw)


class Slow(DataClass):
    """Sample units whose loads sleep (I/O-like: the GIL is released) and may fail."""

    def __init__(self, n_train=8, n_val=2, delay=0.0, fail_at=None, rank=0, size=1):
        self.delay, self.fail_at, self.loads = delay, fail_at, []
        self.setup_shards(n_train, n_val, 1, rank, size, seed=0)

    def load_train(self, units, count):
        self.loads.append(("train", count))
        time.sleep(self.delay)
        if count == self.fail_at:
            raise ValueError(f"corrupt batch file {count}")
        return np.full(2, units[0], np.float32), np.array([count], np.int32)

    def load_val(self, units, count):
        self.loads.append(("val", count))
        time.sleep(self.delay)
        return np.full(2, units[0], np.float32), np.array([count], np.int32)


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("theanompi-prefetch")]


@pytest.mark.parametrize("depth", [1, 3])
def test_same_batches_as_direct_loading_over_epochs(depth):
    direct = synthetic()
    with PrefetchData(synthetic(), depth=depth) as data:
        assert data.n_batch_train == direct.n_batch_train and data.x_train.shape == direct.x_train.shape
        for epoch in range(3):
            data.set_epoch(epoch), direct.set_epoch(epoch)
            for c in range(direct.n_batch_train):
                for got, want in zip(data.train_batch(c), direct.train_batch(c)):
                    np.testing.assert_array_equal(got, want)
            for c in range(direct.n_batch_val):
                for got, want in zip(data.val_batch(c), direct.val_batch(c)):
                    np.testing.assert_array_equal(got, want)
        assert data.misses == 0 and data.hits == 3 * (direct.n_batch_train + direct.n_batch_val)


def test_unexpected_requests_load_synchronously_and_stay_correct():
    direct = synthetic()
    with PrefetchData(synthetic()) as data:
        for c in (5, 1, 2, 7, 0):
            np.testing.assert_array_equal(data.train_batch(c)[0], direct.train_batch(c)[0])
        np.testing.assert_array_equal(data.val_batch(2)[0], direct.val_batch(2)[0])
        data.set_epoch(1), direct.set_epoch(1)
        np.testing.assert_array_equal(data.train_batch(4)[0], direct.train_batch(4)[0])
        assert data.misses == 6 and data.hits == 1  # only 2 (after 1) was the expected next batch


def test_loading_overlaps_with_compute():
    delay, n = 0.08, 8
    slow = Slow(n_train=n, n_val=0, delay=delay)
    start = time.perf_counter()
    with PrefetchData(slow) as data:
        data.set_epoch(0)
        for c in range(n):
            data.train_batch(c)
            time.sleep(delay)  # "training" on the batch
    total = time.perf_counter() - start
    sequential = 2 * n * delay  # 1.28 s
    assert total < 0.8 * sequential, f"{total:.2f} s is no faster than sequential {sequential:.2f} s"
    assert data.waited_s < 0.5 * n * delay and data.hits == n
    assert slow.loads == [("train", c) for c in range(n)]  # nothing loaded twice


def test_loader_exceptions_reach_the_consumer():
    with PrefetchData(Slow(fail_at=2)) as data:
        data.train_batch(0), data.train_batch(1)
        with pytest.raises(ValueError, match="corrupt batch file 2"):
            data.train_batch(2)  # prefetched in the thread, raised here
        with pytest.raises(ValueError, match="corrupt batch file 2"):
            data.train_batch(2)  # and again when loaded synchronously
        with pytest.raises(IndexError, match="training batch 99"):
            data.train_batch(99)
        assert data.train_batch(3)[1][0] == 3  # still usable


def test_close_leaves_no_thread_and_closes_the_loader():
    closed = []

    class Closing(Slow):
        def close(self):
            closed.append(True)

    before = len(prefetch_threads())
    data = PrefetchData(Closing(delay=0.05), depth=2)  # the worker blocks on a full queue
    time.sleep(0.2)
    thread = data._thread
    t0 = time.perf_counter()
    data.close()
    assert time.perf_counter() - t0 < 2.0
    assert not thread.is_alive() and len(prefetch_threads()) == before and closed == [True]
    data.close()  # idempotent
    assert closed == [True]
    with pytest.raises(RuntimeError, match="closed"):
        data.train_batch(0)


def test_garbage_collection_stops_the_thread():
    data = PrefetchData(Slow(delay=0.01))
    data.train_batch(0)
    thread = data._thread
    del data
    gc.collect()
    thread.join(5.0)
    assert not thread.is_alive()


def test_set_epoch_during_a_load_in_flight():
    direct = Slow()
    data = PrefetchData(Slow(delay=0.05))
    try:
        data.set_epoch(3)  # waits for the epoch-0 load in flight, discards it
        direct.set_epoch(3)
        got = [int(data.train_batch(c)[0][0]) for c in range(8)]
        assert got == [int(direct.train_batch(c)[0][0]) for c in range(8)]
        assert data.waited_s > 0
    finally:
        data.close()
