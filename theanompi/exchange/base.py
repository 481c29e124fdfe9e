"""The exchanger interface: collectives on one flat buffer, in place.

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

import numpy as np


class Exchanger(ABC):
    """Collectives over the workers of a session on contiguous 1-D buffers."""

    size: int  # number of participants

    @abstractmethod
    def allreduce_sum(self, buf: np.ndarray) -> np.ndarray:
        """Replace ``buf`` with the element-wise sum over all participants; return it."""

    @abstractmethod
    def bcast(self, buf: np.ndarray, root: int = 0) -> np.ndarray:
        """Replace ``buf`` with ``root``'s copy; return it."""

    def allreduce_mean(self, buf: np.ndarray) -> np.ndarray:
        """Replace ``buf`` with the element-wise mean over all participants; return it."""
        self.allreduce_sum(buf)
        if self.size > 1:
            np.multiply(buf, buf.dtype.type(1.0 / self.size), out=buf, casting="unsafe")
        return buf
