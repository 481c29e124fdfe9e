"""The compressor interface: a sum over the workers of a buffer laid out like the fused params.

A :class:`Compressor` replaces a buffer (BSP ``cdd``'s update vector, ``avg``'s pseudo-gradient) with its sum over
the workers -- or the sum of what its encoding keeps -- in place, through an
:class:`~theanompi.comm.exchange.base.Exchanger` (which counts the bytes sent, ``exchanger.sent``:
:mod:`theanompi.comm.traffic`), and owns whatever it carries from one exchange to the next (error feedback, a warm
start): :meth:`Compressor.state` and :meth:`Compressor.load_state` are what a checkpoint keeps of it, and
:meth:`Compressor.reset` forgets it -- the hook for a change of the workers (an elastic session's new world size),
after which every worker starts the compressor afresh, together.

:class:`ExchangerSum` is the compressor of ``none``, ``fp16`` and ``bf16``: the exchanger itself sums (a 16-bit
exchanger for the last two, :mod:`theanompi.comm.exchange.fp16`), and nothing is carried over.

Example
-------
>>> import numpy as np
>>> from theanompi.comm.exchange.base import Exchanger
>>> class Solo(Exchanger):                      # a 1-worker exchanger
...     size = 1
...     def allreduce_sum(self, buf): return buf
...     def bcast(self, buf, root=0): return buf
>>> plain = ExchangerSum(Solo(), "none")
>>> plain.allreduce_sum(np.array([1.0, 2.0], "float32"), iteration=0)
array([1., 2.], dtype=float32)
>>> plain.state()
{}
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from theanompi.comm.exchange.base import Exchanger


class Compressor(ABC):
    """Sums fused-layout buffers over an exchanger's workers, each with its own encoding on the wire.

    ``name`` is BSP_COMPRESSION's value.
    """

    name: str = ""

    def __init__(self, exchanger: Exchanger):
        self.exchanger = exchanger

    @abstractmethod
    def allreduce_sum(self, buf: Any, iteration: int) -> Any:
        """Replace ``buf`` (1-D, the fused layout) with the workers' sum as this compressor transmits it; return it.

        ``iteration``: the worker's iteration counter (a compressor may exchange uncompressed before some
        iteration). Collective: every worker calls it with the same iteration.
        """

    def reset(self) -> None:  # noqa: B027 - a stateless compressor has nothing to forget
        """Forget what is carried between exchanges (every worker at once: e.g. when the workers changed)."""

    def state(self) -> dict[str, np.ndarray]:
        """What a checkpoint keeps of this worker's compressor (``{}``: nothing carried over)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:  # noqa: B027 - nor anything to take back
        """Take back what :meth:`state` returned (from a checkpoint of as many workers)."""


class ExchangerSum(Compressor):
    """The exchanger's own sum: ``none`` (full precision), ``fp16``/``bf16`` (the exchanger sends 16 bits)."""

    def __init__(self, exchanger: Exchanger, name: str):
        super().__init__(exchanger)
        self.name = name

    def allreduce_sum(self, buf: Any, iteration: int) -> Any:
        return self.exchanger.allreduce_sum(buf)
