"""AVERAGE_WEIGHTS=ema on a worker: the moving average of its model (:class:`WorkerAverage`), validating a model
with averaged weights in place of its own (:meth:`WorkerAverage.in_model`), and what checkpoints keep of it.

Which model is averaged, and where, is the rule's: BSP averages the workers' common parameters on every worker
(after every step, identical everywhere), GOSGD each worker's share of the consensus (the averages travel with the
gossip: :mod:`theanompi.rules.gosgd`), EASGD's server the centre, ASGD's servers the table
(:mod:`theanompi.comm.ps`); the arithmetic is :mod:`theanompi.comm.params_ema`'s.

Batch-norm statistics are averaged, not recomputed: a model that has running statistics (``running_stats()``: the
PyTorch models' floating-point buffers, the pytensor models' batch-norm means and inverse standard deviations)
keeps their moving average too, on every worker and with the same decay, updated after each of its steps; the
averaged model is validated with those averages, pooled over the workers as the model's own are at each epoch's end
(``sync_state``). EASGD's server, which never trains, validates the centre's average with its own statistics, as
it validates the centre.

Example
-------
>>> average = WorkerAverage.for_worker(model, fused, options)          # doctest: +SKIP
>>> average.update(batches=2, epoch=0)                                 # doctest: +SKIP
>>> with average.in_model(comm):                                       # doctest: +SKIP
...     metrics = validate(model, recorder, comm)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from theanompi.comm.fused_params import FlatLayout, FusedParams
from theanompi.comm.param_access import assign, host_copy
from theanompi.comm.params_ema import ParamsEMA
from theanompi.core.session_options import SessionOptions


class WorkerAverage:
    """The moving average of a worker's parameters (in the fused layout) and of its running statistics.

    Constructed with what it averages; :meth:`for_worker` builds it from the session's options, or returns None
    when AVERAGE_WEIGHTS is off.
    """

    def __init__(self, model: Any, fused: FusedParams, params: ParamsEMA, stat_vars: list[Any], stats: ParamsEMA):
        self.model = model
        self.fused = fused
        self.params = params
        self.stat_vars = stat_vars
        self.stats = stats
        self.stats_layout = FlatLayout([np.shape(host_copy(v)) for v in stat_vars])

    @classmethod
    def for_worker(cls, model: Any, fused: FusedParams, options: SessionOptions) -> WorkerAverage | None:
        """The average of ``model`` (whose params ``fused`` holds) when AVERAGE_WEIGHTS=ema, else None."""
        if options.average_weights != "ema":
            return None
        running_stats = getattr(model, "running_stats", None)
        stat_vars = list(running_stats()) if callable(running_stats) else []
        return cls(model, fused, ParamsEMA(options.ema_decay, options.ema_start_epoch, fused.xp), stat_vars,
                   ParamsEMA(options.ema_decay, options.ema_start_epoch))

    # ----- keeping it ----------------------------------------------------------------------
    def _stats_now(self) -> np.ndarray:
        out = np.empty(self.stats_layout.total)
        for view, var in zip(self.stats_layout.views(out), self.stat_vars):
            view[...] = host_copy(var)
        return out

    def begin(self) -> None:
        """Start the averages at the model as it is (unless a checkpoint gave them)."""
        if self.params.values is None:
            self.params.update(self.fused.read(), 0, 0)
        if self.stats.values is None:
            self.stats.update(self._stats_now(), 0, 0)

    def update_params(self, batches: int, epoch: int) -> None:
        """Fold the current parameters in, ``batches`` batches of one worker after the last update."""
        self.params.update(self.fused.read(), batches, epoch)

    def update_stats(self, batches: int, epoch: int) -> None:
        """Fold the current running statistics in (nothing to do for a model without them)."""
        if self.stat_vars:
            self.stats.update(self._stats_now(), batches, epoch)

    def update(self, batches: int, epoch: int) -> None:
        """Both averages, after ``batches`` batches of one worker."""
        self.update_params(batches, epoch)
        self.update_stats(batches, epoch)

    # ----- using it ------------------------------------------------------------------------
    @contextmanager
    def in_model(self, comm: Any, params: Any = None) -> Iterator[None]:
        """The averaged model in place of the model's own inside the block: ``params`` (a flat average kept
        elsewhere, e.g. on ASGD's servers) or this worker's average, and the running statistics' averages pooled
        over ``comm`` (collective when the model has statistics); the model's own are back afterwards."""
        own = self.fused.read().copy()
        own_stats = [host_copy(v) for v in self.stat_vars]
        self.fused.write(self.params.values if params is None else params)
        if self.stat_vars:
            for var, value in zip(self.stat_vars, self.stats_layout.views(self.stats.values)):
                assign(var, value.astype(np.asarray(host_copy(var)).dtype))
            sync_state = getattr(self.model, "sync_state", None)
            if callable(sync_state):
                sync_state(comm)
        try:
            yield
        finally:
            self.fused.write(own)
            for var, value in zip(self.stat_vars, own_stats):
                assign(var, value)

    def adopt(self, params: Any = None) -> None:
        """Make the averaged parameters the model's for good (the final model): ``params``, else this average."""
        self.fused.write(self.params.values if params is None else params)

    # ----- checkpoints ---------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of this worker's averages (host arrays)."""
        stats = self.stats.host_values()
        return {"params": self.params.host_values(), "stats": stats if stats is not None else np.zeros(0),
                "seen": self.params.seen, "stats_seen": self.stats.seen}

    def load(self, state: dict[str, Any]) -> None:
        """Resume the averages from :meth:`state`'s values."""
        self.params.load(np.asarray(state["params"]), int(state["seen"]))
        stats = np.asarray(state["stats"])
        if stats.size == self.stats_layout.total and self.stat_vars:
            self.stats.load(stats, int(state["stats_seen"]))
