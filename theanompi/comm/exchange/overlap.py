"""A flat gradient summed over the workers bucket by bucket while backward still runs (as DDP and Horovod do).

The params' gradients lie in one flat buffer in parameter order (the layout of
:class:`theanompi.comm.fused_params.FusedParams`). Backward produces them roughly in reverse order, the last
layer's first, so :func:`plan_buckets` groups the params *in reverse order* into buckets of at most
``bucket_bytes`` (a param larger than that gets a bucket of its own); each bucket is a contiguous slice of the
buffer. During backward the model reports every param whose gradient is final
(:meth:`OverlappedAllreduce.ready`, e.g. from an autograd hook); once all params of a bucket are in, the
bucket's sum starts on its slice (:meth:`Exchanger.start_allreduce_sum
<theanompi.comm.exchange.base.Exchanger.start_allreduce_sum>`: MPI ``Iallreduce`` on the host) and travels
while backward goes on. :meth:`OverlappedAllreduce.finish` starts the buckets not started yet (params that
backward never reached keep a zero gradient) and waits for all of them: the buffer then holds the sum, exactly
as one allreduce of the whole buffer would leave it.

Buckets start strictly in bucket order on every rank -- a complete bucket waits for the buckets before it --
so every rank issues the same collectives in the same order, whatever order its backward reports params in.
MPI moves a nonblocking collective on only inside MPI calls, so every report also tests the oldest sum in
flight (one ``MPI_Test``, which progresses them all).

Example
-------
>>> import numpy as np
>>> from theanompi.comm.exchange.base import Exchanger
>>> class Solo(Exchanger):                                            # one worker: the sum is the buffer
...     size = 1
...     def allreduce_sum(self, buf): return buf
...     def bcast(self, buf, root=0): return buf
>>> buckets = plan_buckets([3, 2, 4], itemsize=4, bucket_bytes=24)    # at most 6 float32 per bucket
>>> [(list(b.params), b.start, b.stop) for b in buckets]             # params 1-2 first: buffer[3:9]
[([1, 2], 3, 9), ([0], 0, 3)]
>>> reducer = OverlappedAllreduce(Solo(), buckets)
>>> grad = np.zeros(9, "float32")
>>> reducer.bind(grad)
>>> reducer.ready(2); reducer.ready(1)                               # backward reached params 2, then 1
>>> reducer.finish() is grad, reducer.overlapped                     # 1 bucket had started during backward
(True, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from theanompi.comm.exchange.base import Exchanger, PendingSum

#: BSP_BUCKET_MB's unit
MB = 1 << 20


@dataclass(frozen=True)
class Bucket:
    """Consecutive params ``params`` (ascending indices) whose gradients are the flat buffer's ``[start:stop]``."""

    params: range
    start: int
    stop: int


def plan_buckets(sizes: Sequence[int], itemsize: int, bucket_bytes: float) -> list[Bucket]:
    """The params (of ``sizes`` elements each, in buffer order) grouped in reverse order into buckets.

    A bucket takes params from the last one backwards while its bytes stay within ``bucket_bytes``; a param
    that alone exceeds it is a bucket of its own. Bucket 0 ends the buffer.

    >>> [(list(b.params), b.start, b.stop) for b in plan_buckets([4, 2, 6, 3], itemsize=4, bucket_bytes=40)]
    [([2, 3], 6, 15), ([0, 1], 0, 6)]
    >>> [list(b.params) for b in plan_buckets([100, 1, 1], itemsize=4, bucket_bytes=8)]   # 100 floats: alone
    [[1, 2], [0]]
    """
    if not bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes!r}")
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + int(size))
    buckets, hi = [], len(sizes)  # the bucket being filled holds params [lo, hi)
    lo = hi
    for i in reversed(range(len(sizes))):
        if lo < hi and (offsets[hi] - offsets[i]) * itemsize > bucket_bytes:
            buckets.append(Bucket(range(lo, hi), offsets[lo], offsets[hi]))
            hi = lo
        lo = i
    if lo < hi:
        buckets.append(Bucket(range(lo, hi), offsets[lo], offsets[hi]))
    return buckets


class OverlappedAllreduce:
    """Sums one flat gradient buffer over an exchanger's workers, each bucket as soon as backward completed it.

    ``buckets``: from :func:`plan_buckets`. ``check(start, stop)``, if given, runs before a bucket leaves
    (e.g. the NaN check: raise to keep it from the other workers). ``timer``: a reusable context manager around
    the exchange calls made during backward (the rule's ``comm`` timer), so the time they take is counted as
    exchange, not compute. One step: :meth:`ready` for params as their gradients become final, then
    :meth:`finish`. :attr:`overlapped` is the number of buckets the last finished step started during backward.
    """

    def __init__(self, exchanger: Exchanger, buckets: Sequence[Bucket],
                 check: Callable[[int, int], None] | None = None,
                 timer: AbstractContextManager[Any] | None = None):
        self.exchanger = exchanger
        self.buckets = list(buckets)
        self.check = check
        self.timer = timer if timer is not None else nullcontext()
        self.buffer: Any = None
        self.overlapped = 0
        self._bucket_of: list[int] = []
        self._missing: list[int] = []
        self._reported = bytearray()
        self._next = 0  # the next bucket to start
        self._in_flight: list[PendingSum] = []

    @property
    def n_params(self) -> int:
        return self.buckets[0].params.stop if self.buckets else 0

    def bind(self, buffer: Any) -> None:
        """Sum into ``buffer`` (1-D, the buckets' layout; the model's own gradient buffer) from now on."""
        total = self.buckets[0].stop if self.buckets else 0
        if getattr(buffer, "ndim", None) != 1 or buffer.size != total:
            raise ValueError(f"the overlapped exchange needs the flat gradient buffer of {total} elements, got "
                             f"{type(buffer).__name__} {getattr(buffer, 'shape', '')}")
        self.buffer = buffer
        self._bucket_of = [0] * self.n_params
        for b, bucket in enumerate(self.buckets):
            for i in bucket.params:
                self._bucket_of[i] = b
        self._new_step()

    def _new_step(self) -> None:
        self._missing = [len(bucket.params) for bucket in self.buckets]
        self._reported = bytearray(self.n_params)
        self._next = 0
        self._in_flight = []

    def ready(self, i: int) -> None:
        """params[``i``]'s gradient is final for this step: start every bucket now complete, in bucket order."""
        if self.buffer is None:
            raise RuntimeError("OverlappedAllreduce.ready before bind: bind the gradient buffer first")
        if not 0 <= i < self.n_params:
            raise IndexError(f"param index {i} is out of range: the buckets hold {self.n_params} params")
        if self._reported[i]:
            raise RuntimeError(f"params[{i}]'s gradient was reported final twice in one step (two backward passes "
                               "before the exchange?); the overlapped exchange takes one backward per step")
        self._reported[i] = 1
        self._missing[self._bucket_of[i]] -= 1
        if self._next_is_complete():
            while self._next_is_complete():
                self._start_next()  # tests the sums in flight too
        elif self._in_flight:
            with self.timer:
                self._progress()

    def _next_is_complete(self) -> bool:
        return self._next < len(self.buckets) and not self._missing[self._next]

    def _start_next(self) -> None:
        bucket = self.buckets[self._next]
        if self.check is not None:
            self.check(bucket.start, bucket.stop)
        with self.timer:
            self._in_flight.append(self.exchanger.start_allreduce_sum(self.buffer[bucket.start:bucket.stop]))
            self._next += 1
            self._progress()

    def _progress(self) -> None:
        while self._in_flight and self._in_flight[0].test():
            self._in_flight.pop(0)

    def finish(self) -> Any:
        """Start the buckets backward left, wait for every sum; returns the buffer, which now holds the sum."""
        if self.buffer is None:
            raise RuntimeError("OverlappedAllreduce.finish before bind: bind the gradient buffer first")
        overlapped = self._next
        while self._next < len(self.buckets):
            self._start_next()
        for pending in self._in_flight:
            pending.wait()
        self.overlapped = overlapped
        self._new_step()
        return self.buffer
