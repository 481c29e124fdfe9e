"""Background prefetching of the next batch while the current one trains.

:class:`PrefetchData` wraps any DataClass. A worker thread loads the batch that
will be asked for next (training batch ``count + 1``, after the last one the first
validation batch, then the next validation batch, ...) into a bounded queue of
``depth`` batches. ``train_batch(count)``/``val_batch(count)`` return the
prefetched batch when ``count`` is the expected one and otherwise load it
synchronously (after discarding the speculative work), so the results are always
those of the wrapped loader. The seconds the consumer spent blocked on data
accumulate in :attr:`PrefetchData.waited_s` (ClassifierModel's
``with recorder.timer("wait")`` around ``train_batch`` measures the same
time per iteration). An exception raised by the loader is re-raised to the
consumer by the call that asked for that batch. :meth:`PrefetchData.close` (also
run when the wrapper is garbage collected, and at interpreter exit) stops the thread.

The wrapped loader is only used from one thread at a time, and its
``set_epoch`` must select the epoch's order as a function of ``epoch`` alone
(:class:`~theanompi.models.data.base.DataClass` does). Batches must be new
arrays (not a buffer the loader reuses).

Example
-------
>>> from theanompi.models.data.synthetic import SyntheticData
>>> base = SyntheticData((8,), n_classes=2, batch_size=4, rank=0, size=1, seed=0, n_train=16, n_val=4)
>>> with PrefetchData(base) as data:
...     data.set_epoch(0)
...     shapes = [data.train_batch(c)[0].shape for c in range(data.n_batch_train)]
...     data.hits, data.misses
(4, 0)
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
import weakref

from theanompi.models.data.base import DataClass

log = logging.getLogger(__name__)

_SKIPPED = object()
_POLL_S = 0.1


class _Shared:
    """State the consumer and the worker share (the worker never references the wrapper itself)."""

    __slots__ = ("closed", "cancel_before")

    def __init__(self):
        self.closed = False
        self.cancel_before = 0  # jobs with a smaller ticket are skipped, not loaded


def _load(loader, key):
    kind, count = key
    return loader.train_batch(count) if kind == "train" else loader.val_batch(count)


def _worker(loader, jobs: queue.SimpleQueue, results: queue.Queue, shared: _Shared) -> None:
    while True:
        job = jobs.get()
        if job is None or shared.closed:
            return
        ticket, key = job
        item: tuple[int, object, BaseException | None]
        if ticket < shared.cancel_before:
            item = (ticket, _SKIPPED, None)
        else:
            try:
                item = (ticket, _load(loader, key), None)
            except BaseException as e:  # handed to the consumer, raised there
                item = (ticket, None, e)
        while True:
            try:
                results.put(item, timeout=_POLL_S)
                break
            except queue.Full:
                if shared.closed:
                    return


def _shutdown(shared: _Shared, jobs: queue.SimpleQueue, results: queue.Queue, thread: threading.Thread,
              timeout: float) -> None:
    shared.closed = True
    jobs.put(None)
    deadline = time.monotonic() + timeout
    while thread.is_alive() and threading.current_thread() is not thread and time.monotonic() < deadline:
        try:  # make room so a worker blocked on a full queue sees 'closed'
            while True:
                results.get_nowait()
        except queue.Empty:
            pass
        thread.join(_POLL_S)
    if thread.is_alive() and threading.current_thread() is not thread:
        log.warning("prefetch thread %s still busy after %.0f s; left to finish as a daemon", thread.name, timeout)


class PrefetchData:
    """A DataClass that loads the next batch of ``data`` in a background thread.

    Parameters
    ----------
    data : DataClass
        The loader to wrap (``train_batch``, ``val_batch``, ``set_epoch``,
        ``n_batch_train``, ``n_batch_val``); other attributes are passed through.
    depth : int
        Batches loaded ahead (the bound of the queue).
    close_timeout : float
        Seconds :meth:`close` waits for a load in progress to finish.

    Attributes
    ----------
    waited_s : float
        Total seconds the consumer was blocked in ``train_batch``/``val_batch``/``set_epoch``.
    last_wait_s : float
        Seconds blocked in the latest of those calls.
    hits, misses : int
        Batches served from the prefetch queue / loaded synchronously.

    Example
    -------
    >>> from theanompi.models.data.synthetic import SyntheticData
    >>> data = PrefetchData(SyntheticData((4,), 2, batch_size=2, rank=0, size=1, seed=0, n_train=8, n_val=0))
    >>> xb, yb = data.train_batch(0); data.close(); data.closed
    True
    """

    def __init__(self, data, depth: int = 1, close_timeout: float = 10.0):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"depth={depth!r} must be an integer >= 1")
        self.data = data
        self.depth = depth
        self.waited_s = 0.0
        self.last_wait_s = 0.0
        self.hits = 0
        self.misses = 0
        self._scheduled: collections.deque = collections.deque()  # (ticket, key) in submission order
        self._ticket = 0
        self._shared = _Shared()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._results: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=_worker, args=(data, self._jobs, self._results, self._shared),
                                        name=f"theanompi-prefetch-{id(self):x}", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._shared, self._jobs, self._results, self._thread,
                                           close_timeout)
        if self.n_batch_train > 0:
            self._top_up(None)

    # ----- pass-through ---------------------------------------------------------------
    @property
    def n_batch_train(self) -> int:
        return self.data.n_batch_train

    @property
    def n_batch_val(self) -> int:
        return self.data.n_batch_val

    @property
    def closed(self) -> bool:
        return self._shared.closed

    def __getattr__(self, name):
        if name == "data":  # not set yet (failed __init__)
            raise AttributeError(name)
        return getattr(self.data, name)

    # ----- scheduling -----------------------------------------------------------------
    def _successor(self, key):
        if key is None:
            return ("train", 0) if self.n_batch_train > 0 else None
        kind, count = key
        if kind == "train":
            if count + 1 < self.n_batch_train:
                return ("train", count + 1)
            return ("val", 0) if self.n_batch_val > 0 else None
        return ("val", count + 1) if count + 1 < self.n_batch_val else None

    def _top_up(self, last_taken) -> None:
        last = self._scheduled[-1][1] if self._scheduled else last_taken
        while len(self._scheduled) < self.depth:
            last = self._successor(last)
            if last is None:
                return
            self._scheduled.append((self._ticket, last))
            self._jobs.put((self._ticket, last))
            self._ticket += 1

    def _next_result(self):
        while True:
            try:
                return self._results.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the prefetch thread has stopped") from None

    def _cancel_all(self) -> None:
        """Discard everything scheduled: jobs not started are skipped, a load in progress is waited for."""
        self._shared.cancel_before = self._ticket
        while self._scheduled:
            self._scheduled.popleft()
            self._next_result()

    def _take(self, key):
        if self._shared.closed:
            raise RuntimeError("PrefetchData is closed")
        start = time.perf_counter()
        try:
            if self._scheduled and self._scheduled[0][1] == key:
                ticket, _ = self._scheduled.popleft()
                got, value, error = self._next_result()
                assert got == ticket, (got, ticket)
                self.hits += 1
            else:
                self.misses += 1
                self._cancel_all()
                value, error = _load(self.data, key), None
        finally:
            self.last_wait_s = time.perf_counter() - start
            self.waited_s += self.last_wait_s
        if error is not None:
            raise error
        self._top_up(key)
        return value

    # ----- DataClass interface ----------------------------------------------------------
    def train_batch(self, count: int):
        """(inputs, labels) of training batch ``count``: prefetched when it is the expected next one."""
        return self._take(("train", count))

    def val_batch(self, count: int):
        """(inputs, labels) of validation batch ``count``: prefetched when it is the expected next one."""
        return self._take(("val", count))

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch`` on the wrapped loader and start prefetching its first training batch."""
        if self._shared.closed:
            raise RuntimeError("PrefetchData is closed")
        if isinstance(self.data, DataClass) and getattr(self.data, "epoch", None) == epoch:
            return  # already there: a DataClass's order depends on the epoch alone
        start = time.perf_counter()
        try:
            self._cancel_all()
            self.data.set_epoch(epoch)
        finally:
            self.last_wait_s = time.perf_counter() - start
            self.waited_s += self.last_wait_s
        self._top_up(None)

    def start_at(self, epoch: int, units: int) -> None:
        """Resume ``epoch`` of the wrapped loader after ``units`` units (:meth:`DataClass.start_at`), prefetching
        its first batch anew."""
        self._cancel_all()
        self.data.start_at(epoch, units)
        self._top_up(None)

    def close(self) -> None:
        """Stop the thread (waiting for a load in progress), then close the wrapped loader. Idempotent."""
        if self._finalizer.alive:
            self._finalizer()
            self._scheduled.clear()
            close = getattr(self.data, "close", None)
            if close is not None:
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
