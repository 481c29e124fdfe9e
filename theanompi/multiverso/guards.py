"""How a failing worker ends every worker of a Multiverso-style session instead of leaving them hanging.

Every way out is turned into one line naming the worker, then ``MPI_Abort``
(mpiexec then ends every rank):

* an uncaught exception before ``mv.init`` (under a launcher), during a session
  (also when another library replaced ``sys.excepthook``: checked again at exit),
  or in the parameter-server thread;
* leaving the interpreter during a session without ``mv.shutdown()``
  (``sys.exit``, the end of the script);
* ``mv.init`` waiting longer than ``THEANOMPI_MV_TIMEOUT`` seconds (default 60)
  for a worker that never calls it: the message names the missing workers
  (or, while MPI itself starts, a traceback through
  ``_mpi_init_waits_for_every_worker_to_call_mv_init``).

Example
-------
>>> arrival_timeout({"THEANOMPI_MV_TIMEOUT": "2.5"})
2.5
>>> arrival_timeout({"THEANOMPI_MV_TIMEOUT": "soon"})
Traceback (most recent call last):
...
ValueError: THEANOMPI_MV_TIMEOUT='soon' is not allowed; give seconds > 0
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import sys
import time
import traceback

import numpy as np

from theanompi.core.polling import Backoff

TIMEOUT_ENV = "THEANOMPI_MV_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
ARRIVAL_TAG = 32101  # mv.init's arrival notes on COMM_WORLD; every one is received inside mv.init

_session_started = False  # once a session has started, the pre-init check stands aside


def abort_all(world, message: str) -> None:
    """Print ``message`` as one line and abort every worker of ``world`` (does not return)."""
    sys.stderr.write(f"theanompi.multiverso: {message}; aborting every worker\n")
    sys.stderr.flush()
    world.Abort(1)
    os._exit(1)  # MPI_Abort should not return; never run the exit hooks of a failed worker if it does


def arrival_timeout(environ=os.environ) -> float:
    """Seconds ``mv.init`` waits for every worker to call it (``THEANOMPI_MV_TIMEOUT``, default 60)."""
    raw = environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not allowed; give seconds > 0")
    return seconds


def start_mpi(timeout: float):
    """mpi4py's ``MPI`` module. Starting MPI waits for every rank to start it: if that takes over
    ``timeout`` s (a worker never calls ``mv.init``), the process prints where it waits and exits (status 1),
    which makes mpiexec end every rank (a C watchdog: the wait holds the GIL)."""
    if "mpi4py.MPI" in sys.modules:
        return sys.modules["mpi4py.MPI"]
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        return _mpi_init_waits_for_every_worker_to_call_mv_init()
    finally:
        faulthandler.cancel_dump_traceback_later()


def _mpi_init_waits_for_every_worker_to_call_mv_init():  # the name is the message of a start-up timeout
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI (the function is named for a hang there)

    return MPI


def await_every_worker(world, timeout: float) -> None:
    """Return once every rank of ``world`` has called this; abort naming the missing ones after ``timeout`` s."""
    me, others = world.rank, [r for r in range(world.size) if r != world.rank]
    notes = {r: np.zeros(1, np.int32) for r in others}
    receives = {r: world.Irecv(notes[r], source=r, tag=ARRIVAL_TAG) for r in others}
    sends = [world.Isend(np.array([me], np.int32), dest=r, tag=ARRIVAL_TAG) for r in others]
    deadline, backoff = time.monotonic() + timeout, Backoff(max_sleep=0.01)
    while receives:
        for rank in [r for r, req in receives.items() if req.Test()]:
            del receives[rank]
        if receives and time.monotonic() > deadline:
            missing = ", ".join(str(r) for r in sorted(receives))
            abort_all(world, f"worker {me} waited {timeout:g} s in mv.init() for worker(s) {missing}, which never "
                             f"called it ({TIMEOUT_ENV} sets the wait)")
        backoff.wait()
    for request in sends:
        request.Wait()


class SessionGuard:
    """While a session runs: an uncaught exception or an exit without ``mv.shutdown()`` aborts every worker.

    ``close_alone`` ends the session cleanly when the only worker leaves without shutting down.
    """

    def __init__(self, world, close_alone):
        self.world, self.close_alone = world, close_alone
        self.previous_hook = None
        self.exiting = False

    def install(self) -> None:
        global _session_started
        _session_started = True
        self.previous_hook = sys.excepthook
        sys.excepthook = self.on_exception
        atexit.register(self.on_exit)

    def uninstall(self) -> None:
        sys.excepthook = self.previous_hook
        if not self.exiting:  # else atexit is calling on_exit right now: leave its registry alone
            atexit.unregister(self.on_exit)

    def on_exception(self, exc_type, exc, tb) -> None:
        if self.world.size == 1:  # nobody to release: the usual traceback, then on_exit closes the session
            self.previous_hook(exc_type, exc, tb)
            return
        traceback.print_exception(exc_type, exc, tb)
        abort_all(self.world, f"worker {self.world.rank} failed with {exc_type.__name__}: {exc}")

    def on_exit(self) -> None:
        self.exiting = True
        if self.world.size == 1:
            self.close_alone()
            return
        failure = uncaught_exception()
        if failure:  # another excepthook (pytensor installs one) replaced ours and let the interpreter exit
            abort_all(self.world, f"worker {self.world.rank} failed with {failure}")
        abort_all(self.world, f"worker {self.world.rank} exited without calling mv.shutdown() (sys.exit or the "
                              "end of its script)")


def uncaught_exception() -> str | None:
    """'Type: message' of the exception that is ending the interpreter, if one is (``sys.last_value``)."""
    exc = getattr(sys, "last_value", None)
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def serve_or_abort(server, world) -> None:
    """Run ``server.serve()``; if the server thread fails, abort every worker instead of leaving them waiting."""
    try:
        server.serve()
    except BaseException as exc:  # whatever stops the server would hang every worker
        traceback.print_exc()
        abort_all(world, f"the parameter server (a thread of worker {world.rank}) failed with "
                         f"{type(exc).__name__}: {exc}")


def launcher_world() -> tuple[int, int] | None:
    """(rank, size) a launcher (mpiexec) gave this process, read from its environment; None without one."""
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("PMIX_RANK", "OMPI_UNIVERSE_SIZE")):
        if rank_key in os.environ and size_key in os.environ:
            return int(os.environ[rank_key]), int(os.environ[size_key])
    return None


def install_pre_init_hook() -> None:
    """Under a launcher with several ranks, an uncaught exception before ``mv.init`` aborts every rank
    (the others would wait in ``mv.init`` for this one); checked when the interpreter exits, so it works
    whatever excepthook is installed. Elsewhere, and once a session has started, it does nothing."""
    world = launcher_world()
    if world is not None and world[1] > 1:
        atexit.register(_abort_if_failed_before_init, world[0])


def _abort_if_failed_before_init(rank: int) -> None:
    failure = uncaught_exception()
    mpi = sys.modules.get("mpi4py.MPI")
    if failure is None or _session_started or mpi is None:
        return  # without MPI started, the non-zero exit status makes mpiexec end every rank itself
    abort_all(mpi.COMM_WORLD, f"worker {rank} failed before mv.init() with {failure}")
