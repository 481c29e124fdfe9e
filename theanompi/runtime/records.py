"""What a session records as it goes and leaves at its end: epoch metrics (training and
validation, summed over the workers), the progress line, the final model and ``summary.json``.

One owner for each: :func:`epoch_metrics` builds every epoch's record, :func:`end_session`
runs the end-of-session sequence (final model, summary, final accuracy line, close, cleanup).

Example
-------
>>> metrics = epoch_metrics(model, recorder, comm, epoch=0, progress=Progress(10))   # doctest: +SKIP
>>> end_session(model, recorder, run_dir, {"rule": "BSP", "workers": 2, "iterations": 90})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from theanompi.comm.param_access import host_copy
from theanompi.core.no_follow import open_regular
from theanompi.core.safe_io import atomic_write
from theanompi.session.watchdog import ACTIVITY

if TYPE_CHECKING:
    from theanompi.session.recorder import Recorder

log = logging.getLogger("theanompi")


def allreduce_sums(comm: Any, values: list[float]) -> np.ndarray:
    """Element-wise sum of a short list of floats over ``comm``."""
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

    mine = np.asarray(values, dtype=np.float64)
    total = np.empty_like(mine)
    with ACTIVITY.waiting("a collective"):
        comm.Allreduce(mine, total, op=MPI.SUM)  # not in place: safe to repeat after a lost worker
    return total


def validate(model: Any, recorder: Recorder, comm: Any) -> dict[str, float]:
    """Run every validation batch on this rank; metrics averaged over all ranks' samples (of this pass only: it may
    run twice in an epoch, for the model and for its averaged weights)."""
    ACTIVITY.enter("validation")
    before = np.asarray(recorder.val_sums() + recorder.val_top5_sums(), dtype=np.float64)
    for count in range(model.data.n_batch_val):
        start = time.perf_counter()
        model.val_iter(count, recorder)
        recorder.first_validation_call(time.perf_counter() - start)
        ACTIVITY.progress()
    sums = np.asarray(recorder.val_sums() + recorder.val_top5_sums(), dtype=np.float64) - before
    loss_sum, err_sum, n, top5_sum, n_top5 = allreduce_sums(comm, sums.tolist())
    if n == 0:
        return {"val_loss": float("nan"), "val_error": float("nan"), "val_accuracy": float("nan"), "val_samples": 0}
    metrics = {
        "val_loss": loss_sum / n,
        "val_error": err_sum / n,
        "val_accuracy": 1.0 - err_sum / n,
        "val_samples": int(n),
    }
    if n_top5:  # a Theano-MPI model reported top-5 errors
        metrics["val_error_top5"] = top5_sum / n_top5
    return metrics


def train_metrics(recorder: Recorder, comm: Any, bytes_sent: int | None = None) -> dict[str, float]:
    """Epoch training loss/error averaged over all ranks' samples, and the sample count; with ``bytes_sent`` (this
    rank's exchanges' bytes in the epoch, :mod:`theanompi.comm.traffic`) also their sum over the ranks."""
    extra = [] if bytes_sent is None else [float(bytes_sent)]
    loss_sum, err_sum, n, *sent = allreduce_sums(comm, recorder.train_sums() + extra)
    metrics = {"train_loss_all": loss_sum / max(n, 1), "train_error_all": err_sum / max(n, 1), "train_samples": int(n)}
    if sent:
        metrics["bytes_sent"] = int(sent[0])
    return metrics


def format_duration(seconds: float) -> str:
    """``H:MM:SS``, with days once it passes 24 hours.

    Example
    -------
    >>> format_duration(3725), format_duration(90061.4), format_duration(float("inf"))
    ('01:02:05', '1 d 01:01:01', 'unknown')
    """
    if not seconds >= 0 or seconds == float("inf"):
        return "unknown"
    days, rest = divmod(int(round(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days} d {clock}" if days else clock


class Progress:
    """Rank 0's one line per epoch: loss, accuracy, samples/s, ETA.

    ``start_epoch``: the first epoch this session trains (after RESUME); the ETA is the mean time of the epochs
    trained so far times the epochs left.

    >>> progress = Progress(n_epochs=10, start_epoch=4)
    >>> progress.eta_s(epoch=5, elapsed=60.0)   # 2 epochs took 60 s; 4 are left
    120.0
    """

    def __init__(self, n_epochs: int, start_epoch: int = 0):
        self.n_epochs = n_epochs
        self.start_epoch = start_epoch
        self.start = time.perf_counter()
        self.epoch_start = self.start

    def eta_s(self, epoch: int, elapsed: float) -> float:
        """Seconds left after ``epoch`` when this session's epochs so far took ``elapsed`` seconds."""
        trained = epoch + 1 - self.start_epoch
        return elapsed / max(1, trained) * (self.n_epochs - epoch - 1)

    def epoch_done(self, epoch: int, metrics: dict[str, Any]) -> dict[str, float]:
        now = time.perf_counter()
        epoch_s = now - self.epoch_start
        self.epoch_start = now
        elapsed = now - self.start
        eta = self.eta_s(epoch, elapsed)
        rate = metrics.get("train_samples", 0) / epoch_s if epoch_s > 0 else float("nan")
        ema = f" (ema {100 * metrics['ema_val_accuracy']:.2f}%)" if "ema_val_accuracy" in metrics else ""
        log.info(
            "epoch %d/%d  train loss %.4f err %.2f%%  val loss %.4f acc %.2f%%%s  %.0f samples/s  ETA %s",
            epoch + 1, self.n_epochs, metrics["train_loss_all"], 100 * metrics["train_error_all"],
            metrics["val_loss"], 100 * metrics["val_accuracy"], ema, rate, format_duration(eta),
        )
        return {"epoch_s": epoch_s, "samples_per_s": rate, "elapsed_s": elapsed}


def save_final_params(params: Iterable[Any], run_dir: Path | str) -> Path:
    """Rank 0 writes the final parameters (param order) to ``RUN_DIR/final_params.npz``."""
    return save_final_arrays([host_copy(p) for p in params], run_dir)


def save_final_arrays(values: Iterable[np.ndarray], run_dir: Path | str) -> Path:
    """Write host arrays (param order) as ``RUN_DIR/final_params.npz`` (e.g. a checkpoint's model)."""
    arrays: dict[str, Any] = {f"p{i:03d}": v for i, v in enumerate(values)}
    return atomic_write(Path(run_dir) / "final_params.npz", lambda f: np.savez(f, **arrays), label="RUN_DIR")


def load_final_params(run_dir: Path) -> list[np.ndarray]:
    """The arrays :func:`save_final_params` wrote (never unpickles; a regular file, never through a link)."""
    fd = open_regular(Path(run_dir) / "final_params.npz", "final model", root=run_dir, label="RUN_DIR")
    with os.fdopen(fd, "rb") as f, np.load(f, allow_pickle=False) as data:
        return [data[k] for k in sorted(data.files)]


def learning_rate_record(model: Any) -> dict[str, float]:
    """``{"lr": the rate of the model's last step}`` for an epoch's record, where the model says it
    (``learning_rate()``: the classifier bases, Theano-MPI's ``shared_lr``); else ``{}``."""
    learning_rate = getattr(model, "learning_rate", None)
    lr = learning_rate() if callable(learning_rate) else None
    return {"lr": lr} if lr is not None else {}


def epoch_metrics(model: Any, recorder: Recorder, comm: Any, epoch: int, progress: Progress | None,
                  averaged: Callable[[], Any] | None = None, bytes_sent: int | None = None) -> dict[str, Any]:
    """One epoch's record: training metrics and validation (both over ``comm``'s ranks), with ``bytes_sent`` (what
    this rank's exchanges sent in the epoch; every rank of ``comm`` gives it or none does) their sum
    (``bytes_sent``), and, where ``progress`` is given (the rank that prints), the progress line's timings.
    ``averaged`` (AVERAGE_WEIGHTS=ema) gives a context manager that puts the averaged weights in the model: they are
    validated too, as ``ema_val_*``."""
    metrics: dict[str, Any] = {**train_metrics(recorder, comm, bytes_sent), **learning_rate_record(model)}
    metrics.update(validate(model, recorder, comm))
    in_model = averaged() if averaged is not None else None
    if in_model is not None:
        with in_model:
            ema = validate(model, recorder, comm)
        metrics.update({f"ema_{key}": value for key, value in ema.items() if key != "val_samples"})
    if progress is not None:
        ACTIVITY.enter("the epoch's records")
        metrics.update(progress.epoch_done(epoch, metrics))
    return metrics


def end_session(model: Any, recorder: Recorder, run_dir: Path | str | None, summary: dict[str, Any] | None,
                final_model: bool = True, plots: bool = True) -> None:
    """The last steps of a rank: where ``summary`` is given, write it into ``summary.json`` -- with
    ``final_model`` also save the model's params as the final model, add the final accuracy to the
    summary and log it; with ``plots`` (the PLOTS option) draw the run's plots -- then close the
    recorder and clean the model up.

    Example
    -------
    >>> end_session(model, recorder, run_dir, None)   # a rank that writes nothing   # doctest: +SKIP
    """
    if summary is not None and final_model:
        ACTIVITY.enter("writing the final model")
        assert run_dir is not None, "end_session: the final model needs run_dir"
        last = recorder.epochs[-1] if recorder.epochs else {}  # none: a resumed session with nothing to train
        path = save_final_params(model.params, run_dir)
        averaged = {"final_model": "ema", "final_ema_val_accuracy": last["ema_val_accuracy"],
                    "final_ema_val_loss": last.get("ema_val_loss")} if "ema_val_accuracy" in last else {}
        recorder.write_summary({
            "epochs": len(recorder.epochs), "final_val_accuracy": last.get("val_accuracy"),
            "final_val_loss": last.get("val_loss"), "final_params": str(path), "wall_s": last.get("elapsed_s"),
            **averaged, **summary,
        }, plots=plots)
        if averaged:
            log.info("final validation accuracy: %.2f%% (averaged weights, the final model: %.2f%%)",
                     100 * last["val_accuracy"], 100 * last["ema_val_accuracy"])
        elif last:
            log.info("final validation accuracy: %.2f%%", 100 * last["val_accuracy"])
    elif summary is not None:
        recorder.write_summary(summary, plots=plots)
    recorder.close()
    model.cleanup()
