"""The exchanger interface: collectives on one flat buffer.

Host exchangers (``memory = "host"``) take NumPy buffers and work in place;
device exchangers (``memory = "device"``) take CuPy buffers on the rank's GPU.
Callers use the returned array (the same buffer for every exchanger here).

Example
-------
>>> class Solo(Exchanger):                      # a 1-worker exchanger
...     size = 1
...     def allreduce_sum(self, buf): return buf
...     def bcast(self, buf, root=0): return buf
>>> import numpy as np
>>> Solo().allreduce_mean(np.array([2.0, 4.0]))
array([2., 4.])
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from theanompi.backend.arrays import namespace_of


class Exchanger(ABC):
    """Collectives over the workers of a session on contiguous 1-D buffers."""

    size: int  # number of participants
    #: "host" (NumPy buffers) or "device" (CuPy buffers on this rank's GPU)
    memory: str = "host"

    @abstractmethod
    def allreduce_sum(self, buf):
        """Replace ``buf`` with the element-wise sum over all participants; return it."""

    @abstractmethod
    def bcast(self, buf, root: int = 0):
        """Replace ``buf`` with ``root``'s copy; return it."""

    def allreduce_mean(self, buf):
        """Replace ``buf`` with the element-wise mean over all participants; return it."""
        buf = self.allreduce_sum(buf)
        if self.size > 1:
            namespace_of(buf).multiply(buf, buf.dtype.type(1.0 / self.size), out=buf, casting="unsafe")
        return buf
