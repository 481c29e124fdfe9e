"""BSP: bulk-synchronous data parallelism.

* ``cdd``: every iteration the workers' update vectors (gradients of the mean
  loss) are summed by one in-place allreduce of a fused buffer and every worker
  applies W <- W - lr * sum(u)/N. Equals one process with N x the batch,
  momentum included. A model that offers it (``attach_reducer``: the PyTorch
  models) has its gradient summed in buckets of BSP_BUCKET_MB while backward
  still runs (:mod:`theanompi.comm.exchange.overlap`); the step then only waits
  for the last buckets.
* ``avg``: workers step locally and average their parameters every
  ``avg_freq`` iterations (and at every epoch end) -- local SGD. With
  ``BSP_OUTER_OPTIMIZER=nesterov`` that exchange is DiLoCo's outer step
  (:mod:`theanompi.rules.outer_optimizer`): the mean of the pseudo-gradients
  theta_outer - theta_i steps theta_outer by Nesterov-momentum SGD, and every worker
  continues from it. An epoch's end is an exchange too when steps are pending, so
  validation, checkpoints and the final model see theta_outer, which every worker then holds.
  ``BSP_AVG_AT_EPOCH_END=false`` leaves those out (as DiLoCo runs, every ``avg_freq`` steps
  whatever the epochs): an epoch is validated on theta_outer, the last exchange's model,
  while the workers keep their local progress (checkpoints hold each worker's), and only
  the last epoch ends with an exchange, for the final model.
* ``BSP_COMPRESSION`` (:mod:`theanompi.comm.compression`): what travels -- cdd's update
  vectors, avg's pseudo-gradients (plain averaging exchanges those too once compressed:
  an outer step with lr 1, momentum 0) -- in fp16, bf16 or as PowerSGD's factors.

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
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np

from theanompi.backend import arrays
from theanompi.comm.compression import Compressor, check_compression, compression_of, make_compressor, wire_codec
from theanompi.comm.exchange import check_strategy, make_exchanger
from theanompi.comm.exchange.base import Exchanger
from theanompi.comm.exchange.overlap import MB, OverlappedAllreduce, plan_buckets
from theanompi.core.devices import Device
from theanompi.core.errors import ConfigError, ContractError
from theanompi.core.session_options import BSPOptions, SessionOptions
from theanompi.models.contract import SyncType
from theanompi.models.theano_mpi_adapter import follows_theanompi_contract
from theanompi.rules.base import Rule
from theanompi.rules.outer_optimizer import OuterOptimizer
from theanompi.runtime.agreement import check_agreement
from theanompi.runtime.model_build import BuiltWorker, build_worker
from theanompi.runtime.rank_context import RankContext
from theanompi.runtime.worker_loop import WorkerLoop
from theanompi.session.checkpoint import consensus
from theanompi.session.recorder import Recorder

log = logging.getLogger("theanompi")


def check_outer_and_compression(options: BSPOptions, given: frozenset[str]) -> None:
    """The outer optimizer and compression options make sense together (``given``: the options the user set);
    ConfigError naming the key otherwise."""
    if options.outer_optimizer != "none" and options.sync_type != SyncType.AVG:
        raise ConfigError(f"BSP_OUTER_OPTIMIZER={options.outer_optimizer} steps avg's pseudo-gradients; it needs "
                          f"BSP_SYNC_TYPE=avg (the session's is {options.sync_type})")
    if not options.avg_at_epoch_end and options.sync_type != SyncType.AVG:
        raise ConfigError("BSP_AVG_AT_EPOCH_END=false skips avg's epoch-end averages; it needs BSP_SYNC_TYPE=avg "
                          f"(the session's is {options.sync_type})")
    compression = compression_of(options)
    for name, key, needs, has in (("outer_lr", "BSP_OUTER_LR", "BSP_OUTER_OPTIMIZER=nesterov",
                                   options.outer_optimizer == "nesterov"),
                                  ("outer_momentum", "BSP_OUTER_MOMENTUM", "BSP_OUTER_OPTIMIZER=nesterov",
                                   options.outer_optimizer == "nesterov"),
                                  ("powersgd_rank", "BSP_POWERSGD_RANK", "BSP_COMPRESSION=powersgd",
                                   compression == "powersgd"),
                                  ("powersgd_start_iter", "BSP_POWERSGD_START_ITER", "BSP_COMPRESSION=powersgd",
                                   compression == "powersgd")):
        if name in given and not has:
            current = needs.split("=")[0]
            value = options.outer_optimizer if current == "BSP_OUTER_OPTIMIZER" else compression
            raise ConfigError(f"{key}={getattr(options, name)} applies to {needs}, but {current}={value}")


def exchange_notes(options: BSPOptions) -> list[str]:
    """The launch line's words on the outer optimizer and compression (nothing for the defaults)."""
    notes = []
    if options.outer_optimizer == "nesterov":
        notes.append(f"BSP outer optimizer nesterov (DiLoCo: lr {options.outer_lr:g}, momentum "
                     f"{options.outer_momentum:g}, every {options.avg_freq} local steps "
                     + ("and at epoch ends)" if options.avg_at_epoch_end else "and after the last epoch)"))
    elif not options.avg_at_epoch_end and options.sync_type == SyncType.AVG:
        notes.append(f"BSP avg every {options.avg_freq} local steps and after the last epoch, not at other epoch "
                     "ends (validation sees the last average)")
    compression = compression_of(options)
    if compression == "powersgd":
        notes.append(f"BSP compression powersgd (rank {options.powersgd_rank}, from iteration "
                     f"{options.powersgd_start_iter})")
    elif compression != "none":
        notes.append(f"BSP compression {compression}")
    return notes


class BSP(Rule):
    name = "BSP"
    options_class = BSPOptions

    @classmethod
    def check_options(cls, devices: list[Device], options: SessionOptions) -> None:
        assert isinstance(options, BSPOptions)
        check_strategy(options.exch_strategy, devices)
        check_compression(options)

    @classmethod
    def adapt_to_model(cls, model_cls: type, options: SessionOptions,
                       given: frozenset[str]) -> tuple[SessionOptions, list[str]]:
        """The sync type chosen for the ModelClass (:meth:`choose_sync_type`), the outer optimizer and compression
        checked against it and against what the user gave, and said in the launch notes."""
        options, notes = cls.choose_sync_type(model_cls, options, given)
        assert isinstance(options, BSPOptions)
        check_outer_and_compression(options, given)
        return options, notes + exchange_notes(options)

    @classmethod
    def choose_sync_type(cls, model_cls: type, options: SessionOptions,
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
                 exchanger: Exchanger, compressor: Compressor):
        super().__init__(ctx, comm, built, options)
        self.sync_type = sync_type
        self.exchanger = exchanger
        self.compressor = compressor
        self.reducer: OverlappedAllreduce | None = None
        #: avg's theta_outer and its optimizer, when avg exchanges pseudo-gradients (set by :meth:`start_rule`)
        self.outer: OuterOptimizer | None = None
        self.steps_since_average = 0  # avg: local steps since the parameters were last averaged

    @classmethod
    def create(cls, ctx: RankContext) -> BSPWorker:
        """Open the exchanger (collective; 16-bit when compressed so), build the model with its fused buffer where
        the exchanger wants it (NCCL / CUDA-aware MPI: on the GPU), and construct the worker with its compressor."""
        options, comm = ctx.options_as(BSPOptions), ctx.comm
        sync_type = options.sync_type if comm.size > 1 else SyncType.LOCAL
        exchanger = make_exchanger(options.exch_strategy, comm, half=wire_codec(options))
        built = build_worker(ctx, comm, sync_type, exchanger.memory, Recorder(ctx.spec.run_dir, write=comm.rank == 0))
        compressor = make_compressor(options, exchanger, built.fused.layout.shapes, built.fused.dtype)
        return cls(ctx, comm, built, options, sync_type, exchanger, compressor)

    def resumed_state(self, payload: dict, slot: int | None) -> tuple[list, list]:
        """At another number of workers every worker starts from the workers' consensus (their parameters and
        optimizer state averaged; ``cdd``'s workers are identical), else from its own state."""
        if int(payload["n_workers"]) != self.comm.size:
            return consensus(payload)
        return super().resumed_state(payload, slot)

    def world_size_note(self) -> str:
        return "every worker starts from the workers' consensus"

    def start_rule(self) -> None:
        self.reducer = self.overlapped_exchange()
        check_agreement(
            self.comm, n_batch_train=self.model.data.n_batch_train, n_params=self.fused.size,
            param_dtype=str(self.fused.dtype),
            gradient_buckets=[(b.start, b.stop) for b in self.reducer.buckets] if self.reducer else None,
        )
        if self.restored is None:  # a resumed worker continues its own params (avg's differ between exchanges)
            self.exchanger.bcast(self.fused.read(), root=0)  # every worker starts from rank 0's params
            self.fused.write(self.fused.buffer)
        if self.sync_type == SyncType.AVG and self.exchanges_pseudo_gradients():
            nesterov = self.options.outer_optimizer == "nesterov"  # else plain averaging, of pseudo-gradients
            self.outer = OuterOptimizer(self.fused.buffer.copy(), self.options.outer_lr if nesterov else 1.0,
                                        self.options.outer_momentum if nesterov else 0.0)
        if self.restored is not None:
            self.restore_exchange_state(self.restored.get("worker_rule_state") or [])

    def exchanges_pseudo_gradients(self) -> bool:
        """Whether ``avg`` exchanges theta_outer - theta_i rather than the params: with an outer optimizer, with
        compression (error feedback and PowerSGD work on what changed), or without the epoch-end averages
        (theta_outer is then also the model validated between exchanges)."""
        options = self.options
        return options.outer_optimizer != "none" or compression_of(options) != "none" or not options.avg_at_epoch_end

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
        if self.sync_type != SyncType.CDD or not self.options.bucket_mb or not callable(attach):
            return None
        if self.compressor.name != "none":
            if self.comm.rank == 0:
                log.info("BSP_COMPRESSION=%s: the gradient is exchanged after backward (BSP_BUCKET_MB's buckets, "
                         "summed while backward runs, are off)", self.compressor.name)
            return None
        if not self.exchanger.nonblocking:
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
            else:  # a C-mode vector goes as it is
                total = self.compressor.allreduce_sum(self.fused.stage(vector), self.iteration)
        with rec.timer("calc"):
            self.model.apply_update(total)

    def step_avg(self, count: int) -> None:
        super().step(count)
        self.steps_since_average += 1
        if (self.iteration + 1) % self.options.avg_freq == 0:
            self.synchronize()

    def step_local(self, count: int) -> None:
        super().step(count)

    def synchronize(self) -> None:
        """avg's exchange: the params' mean (:meth:`average_params`), or, with an outer optimizer (or compression),
        the outer step with the workers' mean pseudo-gradient (:meth:`outer_step`); then, with AVERAGE_WEIGHTS=ema,
        the common params folded into the average."""
        if self.outer is None:
            self.average_params()
        else:
            self.outer_step(self.outer)
        if self.average is not None:  # AVERAGE_WEIGHTS=ema: the common parameters, after N workers' steps since
            self.average.update_params(self.comm.size * self.steps_since_average, self.epoch)
        self.steps_since_average = 0

    def average_params(self) -> None:
        """Replace every worker's params with their mean over workers."""
        with self.recorder.timer("comm"):
            flat = self.fused.read()
            self.check_finite(flat, "parameters")
            flat = self.compressor.allreduce_sum(flat, self.iteration)
            self.fused.write(flat, scale=1.0 / self.comm.size)

    def update_average(self) -> None:
        """``avg``: the parameters are folded into the average when they are common (:meth:`synchronize`), the
        running statistics after every step; otherwise both after every step."""
        if self.average is not None and self.sync_type == SyncType.AVG:
            self.average.update_stats(self.comm.size, self.epoch)
        else:
            super().update_average()

    def outer_step(self, outer: OuterOptimizer) -> None:
        """Sum the pseudo-gradients theta_outer - theta_i (compressed as BSP_COMPRESSION says), step theta_outer
        with their mean, and set every worker's params to it."""
        with self.recorder.timer("comm"):
            local = self.fused.read()
            self.check_finite(local, "parameters")
            total = self.compressor.allreduce_sum(outer.pseudo_gradient(local), self.iteration)
            total *= total.dtype.type(1.0 / self.comm.size)
            outer.step(total)
            self.fused.write(outer.params)

    def end_of_epoch(self, epoch: int) -> None:
        pending = self.sync_type == SyncType.AVG and self.iteration % self.options.avg_freq
        if pending and (self.options.avg_at_epoch_end or epoch == self.n_epochs - 1):
            self.synchronize()  # validate (and finish) on the common model

    def model_to_validate(self) -> AbstractContextManager[None]:
        """With ``BSP_AVG_AT_EPOCH_END=false`` and local steps since the last exchange: theta_outer in place of this
        worker's params while the epoch is validated, its local params back afterwards."""
        if self.outer is None or self.options.avg_at_epoch_end or not self.iteration % self.options.avg_freq:
            return nullcontext()
        return self._outer_in_place(self.outer)

    @contextmanager
    def _outer_in_place(self, outer: OuterOptimizer) -> Iterator[None]:
        local = self.fused.read().copy()
        self.fused.write(outer.params)
        try:
            yield
        finally:
            self.fused.write(local)

    # the state carried between exchanges ----------------------------------------------------
    def rule_state(self) -> dict[str, Any]:
        """This worker's compressor state; on worker 0 also theta_outer and its momentum (every worker's are
        the same); under ``avg`` the local steps since the last exchange."""
        state: dict[str, Any] = dict(self.compressor.state())
        if self.outer is not None and self.comm.rank == 0:
            state.update(self.outer.state())
        if self.sync_type == SyncType.AVG:  # the batches the average's next update folds in (AVERAGE_WEIGHTS=ema)
            state["steps_since_average"] = self.steps_since_average
        return state

    def restore_exchange_state(self, saved: list[dict[str, Any]]) -> None:
        """From a checkpoint's ``worker_rule_state``: the local steps since the last exchange, theta_outer and its
        momentum (worker 0's); this worker's compressor state when the checkpoint has as many workers and a slot for
        it, else the compressor starts afresh."""
        if saved and "steps_since_average" in saved[0]:  # the same on every worker
            self.steps_since_average = int(saved[0]["steps_since_average"])
        if self.outer is not None and saved and "outer_params" in saved[0]:
            self.outer.load_state(saved[0])
        elif self.outer is not None and self.comm.rank == 0:
            log.warning("RESUME: the checkpoint holds no outer optimizer state; theta_outer starts at its params, "
                        "with zero momentum")
        if len(saved) == self.comm.size and self.restored_worker is not None:
            self.compressor.load_state(saved[self.restored_worker])
            return
        if self.comm.rank == 0 and any(key.startswith(self.compressor.name) for key in (saved or [{}])[0]):
            log.warning("RESUME: a checkpoint of %d workers resumed with %d: the %s state starts afresh",
                        len(saved), self.comm.size, self.compressor.name)
        self.reset_exchange_state()

    def reset_exchange_state(self) -> None:
        """Forget what the compressor carries between exchanges (error feedback, PowerSGD's Q), every worker at
        once: when the workers change (a resume with another number of workers; issue 37's elastic sessions)."""
        self.compressor.reset()

    def bytes_sent(self) -> int:
        """What the exchanger's sums and broadcasts sent (:mod:`theanompi.comm.traffic`)."""
        return self.exchanger.sent.total

    def summary(self) -> dict:
        return {"sync_type": self.options.sync_type,
                "gradient_buckets": len(self.reducer.buckets) if self.reducer is not None else 0,
                "compression": self.compressor.name,
                "outer_optimizer": self.options.outer_optimizer if self.sync_type == SyncType.AVG else "none"}

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
