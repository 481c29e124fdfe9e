"""The exponential moving average of a flat parameter buffer (AVERAGE_WEIGHTS=ema): its arithmetic, wherever it is
kept -- on the workers (BSP, GOSGD), on EASGD's server (the centre's), on ASGD's parameter servers (the table's).

EMA_DECAY ``d`` is the decay *per batch trained by one worker*: an update of the average that follows ``k`` such
batches (a BSP step of N workers: ``k = N``; an ASGD push after ``ASGD_FREQ`` steps: ``k = ASGD_FREQ``; an EASGD
exchange after ``tau`` steps: ``k = tau``) is ``a <- d_n**k * a + (1 - d_n**k) * x``. The average's horizon is then
the same number of samples whatever the rule and the worker count. It grows with the training, as TensorFlow's
``ExponentialMovingAverage(num_updates=...)`` does: ``d_n = min(d, (1 + n) / (10 + n))``, ``n`` the batches of all
workers folded in since EMA_START_EPOCH, so that the average covers about the last tenth of what was trained until
its horizon reaches ``1 / (1 - d)`` batches (a short session is not averaged over its random start). Before
EMA_START_EPOCH the decay is 0: the average is the model itself.

Example
-------
>>> ema = ParamsEMA(decay=0.5, start_epoch=1)
>>> ema.update(np.array([4.0]), batches=1, epoch=0).tolist()     # before the start epoch: the model
[4.0]
>>> ema.update(np.array([0.0]), batches=2, epoch=1).round(6).tolist()     # d_0 = min(0.5, 1/10): 0.1**2 * 4
[0.04]
>>> ema.seen, round(ema_decay(0.9, batches=2, epoch=3, start_epoch=0, seen=1000), 4)
(2, 0.81)
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the warm-up of the decay: d_n = min(EMA_DECAY, (1 + n) / (WARMUP + n)) after n batches
WARMUP = 10


def ema_decay(decay: float, batches: int, epoch: int, start_epoch: int, seen: int) -> float:
    """The decay of one update of the average that follows ``batches`` batches of one worker, in ``epoch``, when
    ``seen`` batches (of all workers) were folded in since the start epoch."""
    if epoch < start_epoch:
        return 0.0
    return min(float(decay), (1.0 + seen) / (WARMUP + seen)) ** int(batches)


def ema_step(average: Any, values: Any, decay: float) -> Any:
    """``average <- decay * average + (1 - decay) * values`` in place (float64 ``average``); returns it.

    >>> a = np.array([1.0, 2.0]); ema_step(a, np.array([3.0, 2.0], "float32"), 0.75).tolist()
    [1.5, 2.0]
    """
    if decay == 0.0:
        average[...] = values
        return average
    average *= decay
    average += (1.0 - decay) * values.astype(np.float64)  # the product in float64 too
    return average


class ParamsEMA:
    """The average of one flat buffer (float64, in the array module ``xp`` of the buffer: NumPy or CuPy).

    :attr:`values` is None until the first :meth:`update` (or :meth:`load` from a checkpoint); :attr:`seen` counts
    the batches (of all workers) folded in since EMA_START_EPOCH (the decay's warm-up; a checkpoint keeps it).
    """

    def __init__(self, decay: float, start_epoch: int, xp: Any = np):
        self.decay = float(decay)
        self.start_epoch = int(start_epoch)
        self.xp = xp
        self.values: Any = None
        self.seen = 0

    def next_decay(self, batches: int, epoch: int, seen: int | None = None) -> float:
        """The decay of the next update, after ``batches`` batches of one worker in ``epoch`` (:func:`ema_decay`);
        counts them as ``seen`` batches of all workers (default ``batches``: an ASGD worker, whose pushes are one
        of N, counts N times its own)."""
        decay = ema_decay(self.decay, batches, epoch, self.start_epoch, self.seen)
        if epoch >= self.start_epoch:
            self.seen += batches if seen is None else seen
        return decay

    def update(self, values: Any, batches: int, epoch: int) -> Any:
        """Fold ``values`` (the model after ``batches`` more batches of one worker, in ``epoch``) in; returns the
        average. The first update starts the average at ``values``."""
        if self.values is None:
            self.values = self.xp.array(values, dtype=np.float64)
            return self.values
        return ema_step(self.values, values, self.next_decay(batches, epoch))

    def load(self, values: Any, seen: int | None = None) -> None:
        """Resume the average from saved values (a checkpoint's), and its count of batches where given."""
        self.values = self.xp.array(values, dtype=np.float64)
        if seen is not None:
            self.seen = int(seen)

    def host_values(self) -> np.ndarray | None:
        """The average as a host array (for checkpoints), or None before the first update."""
        if self.values is None:
            return None
        return self.values.get() if self.xp is not np else self.values.copy()
