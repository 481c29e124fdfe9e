"""EASGD: Elastic Averaging SGD (Zhang, Choromanska & LeCun, 2015), asynchronous.

One **server** rank holds the centre variable ``c``; ``N`` **workers** train
locally (the model's one-function step, ``sync_type=None``). Every ``tau`` local
steps a worker exchanges with the server::

    worker -> server : w                    (its parameters, one fused buffer)
    server           : d = alpha * (w - c);  c <- c + d
    server -> worker : d
    worker           : w <- w - d

The server answers whichever worker asks first (point-to-point messages on a
communicator of their own, ``Iprobe(ANY_SOURCE)`` polled with a short adaptive
sleep so that an idle server, or a worker waiting for its reply, does not keep a
core busy). Parameters travel as contiguous buffers
(:class:`theanompi.comm.fused_params.FusedParams`), never pickled. A worker's buffers live
where its params are (GPU workers: CuPy arrays, handed to a CUDA-aware MPI as
they are, else staged through host memory by
:class:`theanompi.comm.exchange.cudampi.MPIStaging`); the server is a CPU rank.

Ranks
    ``DEVICES`` is read as Theano-MPI read it: the **first device is the
    server's, the others are the workers'** (``cpu0,cpu1,cpu2``: a server and two
    workers), so ``N + 1`` devices start ``N + 1`` ranks. The server is rank 0 of
    the session (first in the launch plan, so it is the rank that logs at INFO
    and prints the progress lines), a CPU rank on the first device's host (it only
    averages and validates: a ``cudaN`` named for it is the place, not a GPU it
    uses; ``cpuN`` is kept as named); workers are ranks 1..N, one per further
    device, in ``DEVICES`` order (worker ``k`` is session rank ``k + 1``). A
    single device (a server without workers) is refused at launch.
Start
    Every rank, the server included, takes worker 0's initial parameters
    (broadcast), so the workers and the centre start from the same point.
Length
    A *global epoch* is one pass over the training set: the sum over workers of
    their ``n_batch_train``. The session trains exactly ``N_EPOCHS`` global
    epochs of local steps in total. To make that count exact although workers
    run at their own pace, the server hands out the steps: every reply grants the
    worker its next block, ``min(tau, steps not yet granted)`` local steps
    (the last block may be partial), and a grant of 0 means *stop*. Each exchange
    reports the steps done since the previous one (the grant), which the server
    sums. A stopped worker sends nothing more and leaves; the server leaves once
    every worker has been told to stop. Workers loop over their own shard's
    epochs (``model.adjust_hyperp(shard_epoch)`` at each shard-epoch start)
    until told to stop, so a worker with a shorter shard simply runs more shard
    epochs and nobody waits for anybody.
Validation
    The server builds the ModelClass too, as worker 0 of a 1-worker session
    (``config.rank=0, config.size=1``): its data view then holds the *whole*
    validation set, so it validates the centre by itself, without a reduction
    over workers that are busy training (its training view is never used). It
    validates once per global epoch, when the reported steps cross a multiple of
    the global epoch, and logs one line (train loss of the workers' steps,
    validation loss/accuracy of the centre, samples/s, ETA).
Results
    The centre is the session's final model: ``RUN_DIR/final_params.npz``; with ``AVERAGE_WEIGHTS=ema`` the
    server keeps the centre's moving average (after every exchange), validates it beside the centre, checkpoints
    it and saves it as the final model.
    The server writes ``epochs.jsonl`` (per global epoch), ``iterations.jsonl``
    (one row per exchange served: ``calc`` = elastic update and validation,
    ``comm`` = receive/send, ``wait`` = idle polling) and ``summary.json``
    (rule, workers, iterations, final validation accuracy, and per worker: local
    steps, exchanges and mean wait per exchange). Each worker ``k`` writes its own
    records into ``RUN_DIR/workers/worker-k/`` (``iterations.jsonl`` per local
    step with the exchange's time in ``comm``, ``epochs.jsonl`` per shard
    epoch, ``summary.json`` with its exact exchange count and wait times).

Checkpoints
    With ``CHECKPOINT_EVERY=K`` the server asks, after every K-th global epoch, each
    active worker for its state: the reply of the worker's next exchange carries a
    flag, and the worker answers it at once with its optimizer state (``state_vars``)
    and its step count. Its parameters are known to the server (the ``w - d`` of
    that exchange), so each worker's snapshot is exact at its own exchange. A worker
    told to stop always sends its final state. Once every worker has answered, the
    server writes one checkpoint: the centre, every worker's parameters, state and
    step count, and the session's step count and global epoch. ``RESUME`` starts every
    worker from its own snapshot (at the start of the shard epoch it was in) and the
    server from the centre; the remaining steps are ``N_EPOCHS`` global epochs minus
    the steps already done.
Lost workers
    With ``ON_WORKER_LOSS=continue`` (mpiexec runs under ULFM) the server notices a
    dead worker (``MPI_ERR_PROC_FAILED``), drops it and hands the steps it had been
    granted but not reported to the others, so the session still trains its
    ``N_EPOCHS`` global epochs (unless every other worker had already stopped: then
    the missing steps are logged). ``summary.json`` lists ``lost_workers``. Losing
    the server ends the session.

Code
    This module is the launch side; :mod:`~theanompi.rules.easgd.server` and
    :mod:`~theanompi.rules.easgd.worker` are the two roles,
    :mod:`~theanompi.rules.easgd.protocol` what they share,
    :mod:`~theanompi.rules.easgd.step_ledger` the server's step bookkeeping and
    :mod:`~theanompi.rules.easgd.snapshots` its checkpoints' (each worker's last snapshot).

Options: ``EASGD_ALPHA`` / ``alpha`` (moving rate, a number in (0, 1], default
0.5) and ``EASGD_TAU`` / ``tau`` (local steps between exchanges, integer >= 1,
default 4).

Example
-------
>>> from theanompi import EASGD
>>> rule = EASGD()
>>> rule.init(devices=["cpu0", "cpu1", "cpu2"], modelfile="theanompi.models.mlp", modelclass="MLP",
...           alpha=0.5, tau=4, n_epochs=10)      # doctest: +SKIP
>>> rule.wait()                                   # 3 ranks: server (cpu0) + 2 workers  # doctest: +SKIP
0
"""

from __future__ import annotations

from theanompi.core.devices import Device
from theanompi.core.errors import ConfigError
from theanompi.core.session_options import EASGDOptions, SessionOptions
from theanompi.rules.base import Rule
from theanompi.rules.easgd.protocol import RULE_NAME
from theanompi.rules.easgd.server import EASGDServer
from theanompi.rules.easgd.step_ledger import grant_steps
from theanompi.rules.easgd.worker import EASGDWorker
from theanompi.runtime.rank_context import RankContext
from theanompi.session.spec import RankSpec


class EASGD(Rule):
    """Asynchronous elastic averaging: one server (the centre) and N local-SGD workers.

    Example
    -------
    >>> from theanompi.core.devices import parse_devices
    >>> ranks = EASGD.launch_ranks(parse_devices("cpu0,cpu1,cpu2"), EASGDOptions())
    >>> [(r.role, str(r.device)) for r in ranks]
    [('server', 'cpu0'), ('worker', 'cpu1'), ('worker', 'cpu2')]
    >>> EASGD.check_options(parse_devices("cpu0"), EASGDOptions())
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: DEVICES='cpu0': EASGD needs a server device and at least one worker ...
    """

    name = RULE_NAME
    supports_worker_loss = True
    options_class = EASGDOptions

    @classmethod
    def check_options(cls, devices: list[Device], options: SessionOptions) -> None:
        """A server device and at least one worker device (Theano-MPI's reading of the device list)."""
        if len(devices) < 2:
            named = ",".join(str(d) for d in devices)
            raise ConfigError(f"DEVICES={named!r}: EASGD needs a server device and at least one worker device (the "
                              "first device is the server's, as in Theano-MPI), e.g. cpu0,cpu1,cpu2 for a server "
                              "and two workers")

    @classmethod
    def launch_ranks(cls, devices: list[Device], options: SessionOptions) -> list[RankSpec]:
        """The server on the first device (session rank 0, a CPU rank on that device's host), then one worker per
        further device."""
        first = devices[0]
        server = RankSpec(first if not first.is_cuda else Device("cpu", 0, first.host), "server")
        return [server] + [RankSpec(device, "worker") for device in devices[1:]]

    @classmethod
    def run_rank(cls, ctx: RankContext) -> None:
        if ctx.role == "server":
            EASGDServer.create(ctx).run()
        else:
            EASGDWorker.create(ctx).run()


__all__ = ["EASGD", "EASGDServer", "EASGDWorker", "grant_steps"]
