"""Building the session's model on a rank: the ModelClass constructed for one worker, checked against the
contract and compiled (:func:`build_model`), and what a worker's loop is constructed with (:class:`BuiltWorker`:
the model, its fused parameters, the recorder, the epoch count).

The rank's compute mode (COMPUTE, resolved for its device) becomes the process's default before the model file is
imported: in JAX mode every function the model compiles itself runs under jax and every shared variable it creates
lives on the device (:func:`theanompi.backend.compute.set_default_compute`).

Example (inside a rule's rank loop)
-------
>>> model = build_model(ctx, worker_rank=0, n_workers=2, sync_type="cdd")                # doctest: +SKIP
>>> built = build_worker(ctx, comm, sync_type="cdd", fused_location="host",
...                      recorder=Recorder(ctx.spec.run_dir, write=comm.rank == 0))      # doctest: +SKIP
>>> built.fused.size                                                                     # doctest: +SKIP
1234
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theanompi.backend.compute import resolve_compute, set_default_compute
from theanompi.comm.fused_params import FusedParams
from theanompi.core.session_options import SessionOptions
from theanompi.models import current_config
from theanompi.models.contract import WorkerConfig, check_model_instance
from theanompi.models.loader import load_model_class
from theanompi.models.theano_mpi_adapter import TheanoMPIModel, follows_theanompi_contract
from theanompi.runtime.averaged_weights import WorkerAverage
from theanompi.runtime.rank_context import RankContext
from theanompi.session.recorder import Recorder
from theanompi.session.watchdog import ACTIVITY

log = logging.getLogger("theanompi")


def build_model(ctx: RankContext, worker_rank: int, n_workers: int, sync_type: str | None,
                adjust_model_options: Callable[[type, dict[str, Any]], dict[str, Any]] | None = None) -> Any:
    """Construct the session's ModelClass for one worker, check the contract, compile. ``adjust_model_options``
    (the class, the given MODEL_* values -> the values to build with): a rule's change to the model's options
    (ASGD_MOMENTUM_CORRECTION)."""
    spec = ctx.spec
    ACTIVITY.enter("building the model")
    ACTIVITY.progress("importing")
    set_default_compute(resolve_compute(ctx.options.compute, ctx.device), ctx.device)
    cls = load_model_class(spec.modelfile, spec.modelclass, spec.cwd)
    ACTIVITY.progress("constructing")
    model_options = dict(spec.model_options)
    if adjust_model_options is not None:
        model_options = adjust_model_options(cls, model_options)
    config = WorkerConfig(
        rank=worker_rank, size=n_workers, seed=ctx.options.seed, device=ctx.device,
        sync_type=sync_type, options=ctx.options, model_options=model_options,
        run_dir=Path(spec.run_dir), model_name=spec.modelclass,
    )
    current_config.set_current(config)  # the one global: Theano-MPI's DataClass API, layers2 and lib.opt read it
    model = cls(config)
    if follows_theanompi_contract(model):
        model = TheanoMPIModel(model, config)
    check_model_instance(model, sync_type)
    note = lr_schedule_note(model, ctx.options, spec.modelclass)
    if note and ctx.rank == 0:
        log.warning("%s", note)
    ACTIVITY.progress("compiling")
    model.compile_iter_fns(sync_type)
    ACTIVITY.enter("setting up")
    return model


def lr_schedule_note(model: Any, options: SessionOptions, name: str) -> str | None:
    """The line saying the session's LR_SCHEDULE is off for ``model``, which schedules its own learning rate
    (``own_lr_schedule`` names how), or sets it without the session's help (no ``own_lr_schedule`` member: the
    ModelClass is built on none of ClassifierModel, TorchClassifierModel, Theano-MPI's contract); None otherwise.

    >>> from types import SimpleNamespace
    >>> lr_schedule_note(SimpleNamespace(own_lr_schedule="MODEL_DECAY_EPOCH=20"), SessionOptions(lr_schedule="cosine"),
    ...                  "SignalCNN")
    "LR_SCHEDULE=cosine is off for ModelClass 'SignalCNN': it schedules its own learning rate (MODEL_DECAY_EPOCH=20)"
    >>> lr_schedule_note(SimpleNamespace(own_lr_schedule=None), SessionOptions(lr_schedule="cosine"), "MLP") is None
    True
    """
    if options.lr_schedule == "constant":
        return None
    own = getattr(model, "own_lr_schedule", "it has no own_lr_schedule member: its learning rate is its own code's")
    if not own:
        return None
    return (f"LR_SCHEDULE={options.lr_schedule} is off for ModelClass {name!r}: it schedules its own learning rate "
            f"({own})")


def n_epochs_for(model: Any, options: SessionOptions) -> int:
    """N_EPOCHS if given, else the model's ``n_epochs`` attribute, else 10.

    >>> from types import SimpleNamespace
    >>> n_epochs_for(SimpleNamespace(n_epochs=3), SessionOptions()), n_epochs_for(None, SessionOptions(n_epochs=5))
    (3, 5)
    """
    return options.epochs_for(getattr(model, "n_epochs", None))


@dataclass(frozen=True)
class BuiltWorker:
    """What a worker's loop works on, all of it built before the loop is constructed."""

    model: Any
    fused: FusedParams
    recorder: Recorder
    n_epochs: int
    #: AVERAGE_WEIGHTS=ema: the moving average of the worker's model (None when off)
    average: WorkerAverage | None = None


def build_worker(ctx: RankContext, comm: Any, sync_type: str | None, fused_location: str,
                 recorder: Recorder,
                 adjust_model_options: Callable[[type, dict[str, Any]], dict[str, Any]] | None = None) -> BuiltWorker:
    """Build and compile this worker's model (``comm``: the workers' communicator; ``adjust_model_options``: see
    :func:`build_model`), fuse its parameters where the exchange wants them (``fused_location``: 'host' or
    'device'), and record the time it took as the compile phase."""
    start = time.perf_counter()
    model = build_model(ctx, comm.rank, comm.size, sync_type, adjust_model_options)
    fused = FusedParams(model.params, where=fused_location)
    recorder.record_phase("compile", time.perf_counter() - start)  # model build and compile
    return BuiltWorker(model=model, fused=fused, recorder=recorder, n_epochs=n_epochs_for(model, ctx.options),
                       average=WorkerAverage.for_worker(model, fused, ctx.options))
