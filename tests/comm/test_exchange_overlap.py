"""Gradient buckets and the allreduce overlapped with backward (theanompi.comm.exchange.overlap), in one process.
(With a PyTorch model: tests/models/test_torch_classifier.py; on 2 ranks under mpiexec:
tests/sessions/test_torch.py.)"""

import numpy as np
import pytest
from conftest import RecordingExchanger as Recording

from theanompi.comm.exchange.overlap import Bucket, OverlappedAllreduce, plan_buckets
from theanompi.comm.fused_params import FlatLayout

SIZES = [864, 32, 18432, 64, 40960, 10]  # the CIFAR CNN's params: conv1 W b, conv2 W b, dense W b


def test_buckets_take_params_in_reverse_order_and_are_contiguous_slices_of_the_buffer():
    layout = FlatLayout([(n,) for n in SIZES])
    buckets = plan_buckets(SIZES, itemsize=4, bucket_bytes=80_000)  # 20 000 float32 at most
    # dense b first; dense W (40960 floats) exceeds the cap alone, so it is a bucket of its own; then both convs
    assert buckets == [Bucket(range(5, 6), 60352, 60362), Bucket(range(4, 5), 19392, 60352),
                       Bucket(range(0, 4), 0, 19392)]
    assert buckets[0].stop == layout.total and buckets[-1].start == 0
    for newer, older in zip(buckets, buckets[1:]):
        assert older.stop == newer.start and older.params.stop == newer.params.start  # no gap, no overlap
    for bucket in buckets:  # a bucket's slice is its params' gradients, back to back
        assert (bucket.start, bucket.stop) == (layout.offsets[bucket.params.start], layout.offsets[bucket.params.stop])
        assert (bucket.stop - bucket.start) * 4 <= 80_000 or len(bucket.params) == 1


@pytest.mark.parametrize("bucket_bytes, expected", [
    (1 << 30, [[0, 1, 2, 3, 4, 5]]),                      # everything in one bucket
    (4 * 40970, [[4, 5], [0, 1, 2, 3]]),                  # dense W + b fill one bucket exactly
    (4 * 40969, [[5], [4], [0, 1, 2, 3]]),                # one element less: dense W goes alone
    (1, [[5], [4], [3], [2], [1], [0]]),                  # every param alone
])
def test_bucket_boundaries(bucket_bytes, expected):
    assert [list(b.params) for b in plan_buckets(SIZES, 4, bucket_bytes)] == expected


def test_bucket_size_must_be_positive():
    with pytest.raises(ValueError, match="bucket_bytes must be > 0, got 0"):
        plan_buckets(SIZES, 4, 0)


def overlapped(bucket_bytes: float = 80_000, tests_to_finish: int = 2, check=None):
    grad = np.zeros(sum(SIZES), "float32")
    exchanger = Recording(grad, tests_to_finish)
    reducer = OverlappedAllreduce(exchanger, plan_buckets(SIZES, 4, bucket_bytes), check=check)
    reducer.bind(grad)
    return reducer, exchanger, grad


def test_a_bucket_starts_as_soon_as_its_params_are_final_and_buckets_start_in_order():
    reducer, exchanger, grad = overlapped()
    layout = FlatLayout([(n,) for n in SIZES])
    views = layout.views(grad)
    expected = np.arange(grad.size, dtype="float32")
    for i in (5, 4):  # backward reaches the dense layer first
        views[i][...] = layout.views(expected)[i]
        reducer.ready(i)
    assert exchanger.started == [(60352, 60362), (19392, 60352)]  # both dense buckets left during backward
    np.testing.assert_array_equal(exchanger.values[1], expected[19392:60352])  # with its final values
    for i in (2, 3, 1):  # out of order inside the last bucket: it waits for params[0]
        reducer.ready(i)
    assert len(exchanger.started) == 2
    reducer.ready(0)
    assert exchanger.started[-1] == (0, 19392)
    assert reducer.finish() is grad and reducer.overlapped == 3
    np.testing.assert_array_equal(grad[19392:], 2 * expected[19392:])  # every sum completed into the buffer


def test_a_complete_bucket_waits_for_the_buckets_before_it():
    reducer, exchanger, _ = overlapped(bucket_bytes=1)  # one param per bucket: bucket b holds params[5 - b]
    reducer.ready(3)
    reducer.ready(4)
    assert exchanger.started == []  # bucket 0 (params[5]) is not complete: nothing may start before it
    reducer.ready(5)
    assert [start for start, _ in exchanger.started] == [60352, 19392, 19328]  # params 5, 4, 3 in bucket order


def test_finish_starts_the_buckets_backward_never_completed_and_waits_for_all():
    reducer, exchanger, grad = overlapped(tests_to_finish=1000)  # no sum completes while backward runs
    grad[...] = 1.0
    reducer.ready(5)
    reducer.ready(4)  # params 0-3 never reported (unused by the loss): their bucket starts at finish
    assert reducer.finish() is grad
    assert exchanger.started == [(60352, 60362), (19392, 60352), (0, 19392)] and reducer.overlapped == 2
    np.testing.assert_array_equal(grad, 2.0)
    reducer.ready(5)  # the next step starts afresh
    assert len(exchanger.started) == 4


def test_check_runs_before_a_bucket_leaves_and_stops_it():
    seen = []

    def check(start, stop):
        seen.append((start, stop))
        if start == 19392:
            raise FloatingPointError("NaN in dense W")

    reducer, exchanger, _ = overlapped(check=check)
    reducer.ready(5)
    with pytest.raises(FloatingPointError, match="NaN in dense W"):
        reducer.ready(4)
    assert seen == [(60352, 60362), (19392, 60352)] and exchanger.started == [(60352, 60362)]


def test_misuse_is_refused_with_one_line():
    reducer, _, _ = overlapped()
    reducer.ready(5)
    with pytest.raises(RuntimeError, match=r"params\[5\]'s gradient was reported final twice in one step"):
        reducer.ready(5)
    with pytest.raises(IndexError, match="param index 6 is out of range: the buckets hold 6 params"):
        reducer.ready(6)
    unbound = OverlappedAllreduce(Recording(np.zeros(1)), plan_buckets(SIZES, 4, 80_000))
    with pytest.raises(RuntimeError, match="before bind"):
        unbound.ready(0)
    with pytest.raises(ValueError, match="needs the flat gradient buffer of 60362 elements, got ndarray"):
        unbound.bind(np.zeros(5, "float32"))
