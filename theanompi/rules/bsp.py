"""BSP: bulk-synchronous data parallelism.

* ``cdd``: every iteration the workers' update vectors (gradients of the mean
  loss) are summed by one in-place allreduce of a fused buffer and every worker
  applies W <- W - lr * sum(u)/N. Equals one process with N x the batch,
  momentum included. A model that offers it (``attach_reducer``: the PyTorch
  models) has its gradient summed in buckets of BSP_BUCKET_MB while backward
  still runs (:mod:`theanompi.comm.exchange.overlap`); the step then only waits
  for the last buckets.
* ``avg``: workers step locally and average their parameters every
  ``avg_freq`` iterations (and at every epoch end) -- local SGD.

With a single worker there is nothing to exchange: the model compiles its
one-function local step whatever the sync type (the same arithmetic as ``cdd``).

Example
-------
>>> from theanompi import BSP
>>> rule = BSP()
>>> rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
...           sync_type="avg", avg_freq=4)     # doctest: +SKIP
>>> rule.wait()                                 # doctest: +SKIP
0
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from theanompi.backend import arrays
from theanompi.comm.exchange import check_strategy, make_exchanger
from theanompi.comm.exchange.base import Exchanger
from theanompi.comm.exchange.overlap import MB, OverlappedAllreduce, plan_buckets
from theanompi.core.devices import Device
from theanompi.core.errors import ConfigError, ContractError
from theanompi.core.session_options import BSPOptions, SessionOptions
from theanompi.models.contract import SyncType
from theanompi.models.theano_mpi_adapter import follows_theanompi_contract
from theanompi.rules.base import Rule
from theanompi.runtime.agreement import check_agreement
from theanompi.runtime.model_build import BuiltWorker, build_worker
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.worker_loop import WorkerLoop
from theanompi.session.recorder import Recorder

log = logging.getLogger("theanompi")


class BSP(Rule):
    name = "BSP"
    options_class = BSPOptions

    @classmethod
    def check_options(cls, devices: list[Device], options: SessionOptions) -> None:
        assert isinstance(options, BSPOptions)
        check_strategy(options.exch_strategy, devices)

    @classmethod
    def adapt_to_model(cls, model_cls: type, options: SessionOptions,
                       given: frozenset[str]) -> tuple[SessionOptions, list[str]]:
        """Choose the sync type for a ModelClass without ``apply_update`` and say which was chosen.

        * written for Theano-MPI (``reset_iter``): cdd as Theano-MPI did it (the workers' ``vels``
          summed into ``vels2``, see theanompi.models.theano_mpi_adapter);
        * otherwise ``avg`` unless the user asked for cdd (then an error: cdd needs apply_update).
        """
        options, notes = super().adapt_to_model(model_cls, options, given)
        assert isinstance(options, BSPOptions)
        name = model_cls.__name__
        if callable(getattr(model_cls, "apply_update", None)) or options.sync_type != SyncType.CDD:
            return options, notes + [f"BSP sync type {options.sync_type}"]
        if follows_theanompi_contract(model_cls):
            return options, notes + [(f"BSP sync type cdd as Theano-MPI ran it (ModelClass {name!r} has no "
                                      "apply_update: each step the workers' vels are summed into vels2)")]
        if "sync_type" in given:
            raise ConfigError(f"BSP_SYNC_TYPE=cdd: ModelClass {name!r} lacks method 'apply_update', which cdd needs "
                              "(or use BSP_SYNC_TYPE=avg)")
        chosen = options.replace(sync_type=SyncType.AVG)
        return chosen, notes + [f"BSP sync type avg (chosen: ModelClass {name!r} has no apply_update, which cdd needs)"]

    @classmethod
    def run_rank(cls, ctx: RankContext) -> None:
        BSPWorker.create(ctx).run()


class BSPWorker(WorkerLoop[BSPOptions]):
    """One BSP worker: the shared epoch loop with BSP's exchanges in :meth:`step`.

    ``sync_type``: what the model compiled (the session's, or 'local' for a single worker); ``exchanger``: how
    the workers' buffers travel; :attr:`reducer`: with ``cdd``, the exchange overlapped with backward when the
    model offers it (set by :meth:`start_rule`; None: one allreduce after backward).
    """

    rule_name = "BSP"

    def __init__(self, ctx: RankContext, comm: Any, built: BuiltWorker, options: BSPOptions, sync_type: str,
                 exchanger: Exchanger):
        super().__init__(ctx, comm, built, options)
        self.sync_type = sync_type
        self.exchanger = exchanger
        self.reducer: OverlappedAllreduce | None = None
        self.steps_since_average = 0  # avg: local steps since the parameters were last averaged

    @classmethod
    def create(cls, ctx: RankContext) -> BSPWorker:
        """Open the exchanger (collective), build the model with its fused buffer where the exchanger wants it
        (NCCL / CUDA-aware MPI: on the GPU), and construct the worker."""
        options, comm = ctx.options_as(BSPOptions), ctx.comm
        sync_type = options.sync_type if comm.size > 1 else SyncType.LOCAL
        exchanger = make_exchanger(options.exch_strategy, comm)
        built = build_worker(ctx, comm, sync_type, exchanger.memory, Recorder(ctx.spec.run_dir, write=comm.rank == 0))
        return cls(ctx, comm, built, options, sync_type, exchanger)

    def start_rule(self) -> None:
        self.reducer = self.overlapped_exchange()
        check_agreement(
            self.comm, n_batch_train=self.model.data.n_batch_train, n_params=self.fused.size,
            param_dtype=str(self.fused.dtype),
            gradient_buckets=[(b.start, b.stop) for b in self.reducer.buckets] if self.reducer else None,
        )
        self.exchanger.bcast(self.fused.read(), root=0)  # every worker starts from rank 0's params
        self.fused.write(self.fused.buffer)

    def step(self, count: int) -> None:
        if self.sync_type == SyncType.CDD:
            self.step_cdd(count)
        elif self.sync_type == SyncType.AVG:
            self.step_avg(count)
        else:
            super().step(count)

    def overlapped_exchange(self) -> OverlappedAllreduce | None:
        """With ``cdd``, BSP_BUCKET_MB > 0, a transport that can have sums in flight (``exchanger.nonblocking``)
        and a model that offers ``attach_reducer``: the gradient's buckets (reverse parameter order, BSP_BUCKET_MB
        each), attached to the model, whose backward starts their sums; else None."""
        attach = getattr(self.model, "attach_reducer", None)
        if (self.sync_type != SyncType.CDD or not self.options.bucket_mb or not self.exchanger.nonblocking
                or not callable(attach)):
            return None
        buckets = plan_buckets(self.fused.layout.sizes, self.fused.dtype.itemsize, self.options.bucket_mb * MB)

        def check_bucket(start: int, stop: int) -> None:  # NaN/Inf stop here, before the bucket leaves
            self.check_finite(reducer.buffer, "update vector", (start, stop))

        reducer = OverlappedAllreduce(self.exchanger, buckets, check=check_bucket, timer=self.recorder.timer("comm"))
        try:
            attach(reducer)
        except ValueError as exc:  # bind refused the buffer
            raise ContractError(f"ModelClass {type(self.model).__name__!r}.attach_reducer: {exc}") from None
        self._check_update_vector(reducer.buffer)
        if self.fused.stage(reducer.buffer) is not reducer.buffer:
            raise ContractError(f"ModelClass {type(self.model).__name__!r}: attach_reducer bound a buffer the "
                                f"exchange cannot sum in place (a writable {self.exchanger.memory} array is needed)")
        if self.comm.rank == 0:
            log.info("BSP cdd: the gradient is summed in %d bucket(s) of <= %g MB while backward runs",
                     len(buckets), self.options.bucket_mb)
        return reducer

    def step_cdd(self, count: int) -> None:
        rec = self.recorder
        with rec.timer("calc"):
            vector = self.model.train_iter(count, rec)  # with a reducer, backward started the buckets' sums
        if self.iteration == 0:
            self._check_update_vector(vector)
        if self.reducer is None:
            self.check_finite(vector, "update vector")  # a reducer checked each bucket before it left
        with rec.timer("comm"):
            if self.reducer is not None:
                total = self.reducer.finish()
            else:
                total = self.exchanger.allreduce_sum(self.fused.stage(vector))  # a C-mode vector goes as it is
        with rec.timer("calc"):
            self.model.apply_update(total)

    def step_avg(self, count: int) -> None:
        super().step(count)
        self.steps_since_average += 1
        if (self.iteration + 1) % self.options.avg_freq == 0:
            self.average_params()

    def step_local(self, count: int) -> None:
        super().step(count)

    def average_params(self) -> None:
        """Replace every worker's params with their mean over workers."""
        with self.recorder.timer("comm"):
            flat = self.fused.read()
            self.check_finite(flat, "parameters")
            flat = self.exchanger.allreduce_sum(flat)
            self.fused.write(flat, scale=1.0 / self.comm.size)
        if self.average is not None:  # AVERAGE_WEIGHTS=ema: the common parameters, after N workers' steps since
            self.average.update_params(self.comm.size * self.steps_since_average, self.epoch)
        self.steps_since_average = 0

    def update_average(self) -> None:
        """``avg``: the parameters are folded into the average when they are common (:meth:`average_params`), the
        running statistics after every step; otherwise both after every step."""
        if self.average is not None and self.sync_type == SyncType.AVG:
            self.average.update_stats(self.comm.size, self.epoch)
        else:
            super().update_average()

    def end_of_epoch(self, epoch: int) -> None:
        if self.sync_type == SyncType.AVG and self.iteration % self.options.avg_freq:
            self.average_params()  # validate (and finish) on the common model

    def summary(self) -> dict:
        return {"sync_type": self.options.sync_type,
                "gradient_buckets": len(self.reducer.buckets) if self.reducer is not None else 0}

    def _check_update_vector(self, vector) -> None:
        name = type(self.model).__name__
        contiguous = vector.flags.c_contiguous if isinstance(vector, np.ndarray) else arrays.kind(vector) != "other"
        ok = contiguous and getattr(vector, "ndim", None) == 1
        if not ok or vector.size != self.fused.size or vector.dtype != self.fused.dtype:
            got = f"{type(vector).__name__} {getattr(vector, 'shape', '')} {getattr(vector, 'dtype', '')}"
            raise ContractError(
                f"ModelClass {name!r}: with BSP_SYNC_TYPE=cdd, train_iter must return the update vector as a "
                f"contiguous 1-D {self.fused.dtype} array (NumPy, or jax/CuPy in JAX mode) of {self.fused.size} "
                f"elements; got {got}"
            )
