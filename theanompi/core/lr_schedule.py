"""The session's learning-rate schedule: LR_SCHEDULE composed with LR_SCALING and WARMUP_EPOCHS, as one function of
the training's progress in epochs.

``progress`` is ``epoch + count / n_batch_train`` (the epoch counted from 0, ``count`` the step inside it), so the
rate depends on nothing but where training is: a resumed session, which restarts at an epoch's first step, goes on
with exactly the rates of an uninterrupted one. For a base rate ``lr`` (a model's MODEL_LR, a Theano-MPI model's
``shared_lr``, ASGD's ASGD_LR) with ``N`` workers and ``E`` epochs (the session's):

* LR_SCALING / WARMUP_EPOCHS / WARMUP_START_FACTOR: ``peak(p) = lr * ramp(p)``, ``ramp`` = 1 without scaling, ``N``
  with LR_SCALING=linear (Goyal et al. 2017's rule for SGD), ``sqrt(N)`` with LR_SCALING=sqrt (Krizhevsky 2014,
  Hoffer et al. 2017: the gradient's noise falls as ``1/sqrt(N)``; gentler where the linear rule diverges), rising
  linearly to that factor over the first WARMUP_EPOCHS epochs from WARMUP_START_FACTOR (default 1: Goyal et al.'s
  gradual warm-up from the one-worker rate; below 1 a warm-up from a smaller rate, as PyTorch's ``LinearLR``
  ``start_factor``, scaled or not);
* ``constant``: ``peak(p)``;
* ``step``: ``peak(p) * LR_DECAY ** k``, ``k`` the milestones of LR_DECAY_EPOCHS already reached (``p >= m``);
* ``cosine``: ``LR_MIN + (peak(p) - LR_MIN) * (1 + cos(pi * p / E)) / 2``, from the peak at ``p = 0`` to LR_MIN at
  the session's end (Loshchilov & Hutter 2017's annealing without restarts; past ``E``, LR_MIN).

Example
-------
>>> s = LRSchedule("cosine", n_epochs=10, n_workers=4, scaling="linear", warmup_epochs=2.0)
>>> [round(s.lr(0.1, p), 4) for p in (0.0, 1.0, 5.0, 10.0)]      # warm-up x1 -> x4, then the cosine's half
[0.1, 0.2439, 0.2, 0.0]
>>> step = LRSchedule("step", n_epochs=30, decay_epochs="10,20", decay=0.1)
>>> [round(step.lr(1.0, p), 4) for p in (9.99, 10.0, 25.0)]
[1.0, 0.1, 0.01]
>>> step.varies_within(3), s.varies_within(9)
(False, True)
>>> warm = LRSchedule(n_epochs=30, n_workers=8, warmup_epochs=3.0, warmup_start=0.125)   # unscaled, from lr / 8
>>> [round(warm.lr(0.02, p), 5) for p in (0.0, 1.5, 3.0, 20.0)]
[0.0025, 0.01125, 0.02, 0.02]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from theanompi.core.options import parse_int_list

#: LR_SCHEDULE's values
SCHEDULES = ("constant", "step", "cosine")
#: LR_SCALING's values
SCALINGS = ("none", "linear", "sqrt")


def scaling_factor(scaling: str, n_workers: int) -> float:
    """LR_SCALING's factor for ``n_workers`` workers once any warm-up is over.

    >>> scaling_factor("none", 4), scaling_factor("linear", 4), scaling_factor("sqrt", 4)
    (1.0, 4.0, 2.0)
    """
    if scaling == "linear":
        return float(n_workers)
    if scaling == "sqrt":
        return math.sqrt(n_workers)
    return 1.0


@dataclass(frozen=True)
class LRSchedule:
    """The learning rate of a session at any progress (see the module doc); built from the session's options by
    :meth:`of_session`."""

    kind: str = "constant"
    n_epochs: int = 1
    n_workers: int = 1
    scaling: str = "none"
    warmup_epochs: float = 0.0
    warmup_start: float = 1.0
    decay_epochs: str = ""
    decay: float = 0.1
    lr_min: float = 0.0

    @classmethod
    def of_session(cls, options: Any, n_workers: int, n_epochs: int) -> LRSchedule:
        """The schedule of a session's options (a SessionOptions) for ``n_workers`` workers and ``n_epochs``."""
        return cls(kind=options.lr_schedule, n_epochs=max(1, int(n_epochs)), n_workers=int(n_workers),
                   scaling=options.lr_scaling, warmup_epochs=float(options.warmup_epochs),
                   warmup_start=float(options.warmup_start_factor),
                   decay_epochs=options.lr_decay_epochs or "", decay=float(options.lr_decay),
                   lr_min=float(options.lr_min))

    # ----- the pieces --------------------------------------------------------------------------
    def ramp(self, progress: float) -> float:
        """LR_SCALING's factor (:func:`scaling_factor`: 1, N or sqrt(N)), reached linearly over WARMUP_EPOCHS from
        WARMUP_START_FACTOR.

        >>> LRSchedule(n_workers=8, scaling="linear", warmup_epochs=4).ramp(1.0)
        2.75
        >>> LRSchedule(n_workers=16, scaling="sqrt", warmup_epochs=4).ramp(2.0), LRSchedule(n_workers=16).ramp(2.0)
        (2.5, 1.0)
        >>> LRSchedule(warmup_epochs=4, warmup_start=0.2).ramp(1.0)          # no scaling: from 0.2 up to 1
        0.4
        """
        target = scaling_factor(self.scaling, self.n_workers)
        if not self.warming_up(progress):
            return target
        return self.warmup_start + (target - self.warmup_start) * max(0.0, progress) / self.warmup_epochs

    def warms_up(self) -> bool:
        """Whether there is a warm-up: WARMUP_EPOCHS, and a start (WARMUP_START_FACTOR) other than the factor it
        ramps to."""
        return self.warmup_epochs > 0 and self.warmup_start != scaling_factor(self.scaling, self.n_workers)

    def warming_up(self, progress: float) -> bool:
        """Whether ``progress`` (epochs, fractional, or an epoch's start) is inside the warm-up."""
        return self.warms_up() and progress < self.warmup_epochs

    def milestones_passed(self, progress: float) -> int:
        """How many of LR_DECAY_EPOCHS ``progress`` has reached."""
        return sum(1 for m in parse_int_list(self.decay_epochs) if progress >= m)

    def cosine(self, progress: float) -> float:
        """The cosine's weight of the peak, from 1 at the start to 0 at the session's last step and after."""
        q = min(max(progress / self.n_epochs, 0.0), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * q))

    # ----- the rate ------------------------------------------------------------------------------
    def lr(self, base: float, progress: float) -> float:
        """The learning rate at ``progress`` (epochs, fractional) of a base rate ``base``."""
        peak = float(base) * self.ramp(progress)
        if self.kind == "step":
            return peak * self.decay ** self.milestones_passed(progress)
        if self.kind == "cosine":
            return self.lr_min + (peak - self.lr_min) * self.cosine(progress)
        return peak

    def varies_within(self, epoch: int) -> bool:
        """Whether the rate changes between the steps of ``epoch`` (a warm-up, or the cosine), so that it must be set
        at every step and not only at the epoch's start (step milestones are whole epochs)."""
        return self.warming_up(epoch) or self.kind == "cosine"

    def is_constant(self) -> bool:
        """Whether the rate never changes (no schedule, no warm-up): nothing to set after the start.

        >>> LRSchedule().is_constant(), LRSchedule("step").is_constant()
        (True, False)
        """
        return self.kind == "constant" and not self.warms_up()
