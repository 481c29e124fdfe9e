"""The exchanger interface: collectives on one flat buffer.

Host exchangers (``memory = "host"``) take NumPy buffers and work in place;
device exchangers (``memory = "device"``) take CuPy buffers on the rank's GPU.
Callers use the returned array (the same buffer for every exchanger here). Every exchanger counts what its
calls send in :attr:`Exchanger.sent` (:mod:`theanompi.comm.traffic`: an allreduce as a ring's share per rank).

:meth:`Exchanger.start_allreduce_sum` starts a sum and returns a :class:`PendingSum` to complete it later
(``Iallreduce`` over MPI), so that several sums can be in flight while the caller computes (BSP's buckets
overlapped with backward, :mod:`theanompi.comm.exchange.overlap`). An exchanger without a nonblocking
collective sums at once and returns a completed handle.

Example
-------
>>> class Solo(Exchanger):                      # a 1-worker exchanger
...     size = 1
...     def allreduce_sum(self, buf): return buf
...     def bcast(self, buf, root=0): return buf
>>> import numpy as np
>>> Solo().allreduce_mean(np.array([2.0, 4.0]))
array([2., 4.])
>>> pending = Solo().start_allreduce_sum(np.array([1.0, 3.0]))
>>> pending.test(), pending.wait()
(True, array([1., 3.]))
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from theanompi.backend.arrays import namespace_of
from theanompi.comm.traffic import SentBytes


class PendingSum:
    """A sum in flight over ``buf``: :meth:`wait` completes it and returns ``buf``.

    ``request`` is anything with mpi4py's ``Test()`` / ``Wait()`` (an ``MPI.Request``), or None for a sum that
    is already done; ``on_done`` runs once, after the request completed (e.g. a staged host copy written back
    to the GPU buffer).
    """

    __slots__ = ("buf", "request", "on_done")

    def __init__(self, buf, request=None, on_done: Callable[[], None] | None = None):
        self.buf = buf
        self.request = request
        self.on_done = on_done

    def test(self) -> bool:
        """Drive the sum on (MPI progresses a nonblocking collective only inside MPI calls); True once done."""
        if self.request is not None and not self.request.Test():
            return False
        self._complete()
        return True

    def wait(self):
        """Block until the sum is done; returns ``buf``, which holds it."""
        if self.request is not None:
            self.request.Wait()
        self._complete()
        return self.buf

    def _complete(self) -> None:
        self.request = None
        if self.on_done is not None:
            done, self.on_done = self.on_done, None
            done()


class Exchanger(ABC):
    """Collectives over the workers of a session on contiguous 1-D buffers."""

    size: int  # number of participants
    #: "host" (NumPy buffers) or "device" (CuPy buffers on this rank's GPU)
    memory: str = "host"
    #: whether :meth:`start_allreduce_sum` returns while the sum is still under way (MPI ``Iallreduce``, NCCL
    #: enqueued on a CUDA stream); only then does BSP overlap the exchange with backward
    nonblocking: bool = False

    def __init__(self) -> None:
        #: the bytes this rank's sums and broadcasts sent (:mod:`theanompi.comm.traffic`); an exchanger over a
        #: transport shares the transport's
        self.sent = SentBytes()

    @abstractmethod
    def allreduce_sum(self, buf):
        """Replace ``buf`` with the element-wise sum over all participants; return it."""

    @abstractmethod
    def bcast(self, buf, root: int = 0):
        """Replace ``buf`` with ``root``'s copy; return it."""

    def start_allreduce_sum(self, buf) -> PendingSum:
        """Start replacing ``buf`` with the element-wise sum over all participants; ``.wait()`` completes it.

        ``buf`` must not be read or written until then. Every participant starts the same sums in the same
        order. This default sums at once (a transport without a nonblocking collective); host MPI overrides it
        with ``Iallreduce``.
        """
        return PendingSum(self.allreduce_sum(buf))

    def allreduce_mean(self, buf):
        """Replace ``buf`` with the element-wise mean over all participants; return it."""
        buf = self.allreduce_sum(buf)
        if self.size > 1:
            namespace_of(buf).multiply(buf, buf.dtype.type(1.0 / self.size), out=buf, casting="unsafe")
        return buf
