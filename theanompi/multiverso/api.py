"""Multiverso's process API on theanompi's parameter server.

Run a script under ``mpiexec -n N python script.py`` (or as one plain process):
every process is a worker; the parameter server runs as a thread of worker 0
(the master) and talks MPI over its own communicator.

Blocking behaviour
------------------
* ``init`` and ``shutdown`` are collective: every worker must call them.
* ``barrier`` blocks until every worker has called it.
* ``get`` always waits for the values. ``add(..., sync=False)`` returns once the
  delta is handed to MPI; ``add(..., sync=True)`` waits until it is applied.
* Async server (``init(sync=False)``, the default): adds apply as they arrive,
  gets return the current values; no ordering between workers.
* Sync server (``init(sync=True)``): every worker must call add/get on a table in
  the same order and number; each worker's i-th ``get`` blocks until every
  worker has asked for its i-th get and returns identical values. A worker that
  shuts down while others wait for a get it will never match makes those gets
  fail with a message naming both workers, instead of hanging.
* An uncaught exception in any worker after ``init`` aborts every worker.

Example
-------
>>> import theanompi.multiverso as mv
>>> mv.init()                                                   # doctest: +SKIP
>>> t = mv.ArrayTableHandler(4, init_value=np.ones(4))          # doctest: +SKIP
>>> mv.barrier(); t.get()                                       # doctest: +SKIP
array([1., 1., 1., 1.], dtype=float32)
>>> mv.shutdown()                                               # doctest: +SKIP
"""

from __future__ import annotations

import sys
import threading
import traceback

from theanompi.ps.updaters import UPDATERS

_state = None


class _Session:
    def __init__(self, sync: bool, updater: str, lr: float, momentum: float):
        from mpi4py import MPI

        from theanompi.ps.client import PSClient
        from theanompi.ps.server import TableServer

        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise RuntimeError("theanompi.multiverso needs an MPI library with MPI_THREAD_MULTIPLE")
        self.world = MPI.COMM_WORLD
        self.comm = self.world.Dup()  # parameter-server traffic stays off the user's communicator
        self.sync, self.updater, self.lr, self.momentum = sync, updater, lr, momentum
        self.next_table = 0
        self.server_thread = None
        if self.comm.rank == 0:
            server = TableServer(self.comm, list(range(self.comm.size)), 0, 1, sync=sync)
            self.server_thread = threading.Thread(target=server.serve, name="theanompi-ps", daemon=True)
            self.server_thread.start()
        self.client = PSClient(self.comm, [0])
        self._previous_hook = sys.excepthook
        sys.excepthook = self._abort_all

    def _abort_all(self, exc_type, exc, tb):
        traceback.print_exception(exc_type, exc, tb)
        sys.stderr.write(f"theanompi.multiverso: worker {self.comm.rank} failed; aborting every worker\n")
        sys.stderr.flush()
        self.world.Abort(1)

    def new_table_id(self) -> int:
        self.next_table += 1
        return self.next_table - 1

    def close(self) -> None:
        self.client.done()  # first: a sync get another worker waits for can then fail instead of hanging
        if self.server_thread is not None:
            self.server_thread.join()
        self.comm.Barrier()
        self.comm.Free()
        sys.excepthook = self._previous_hook


def session() -> _Session:
    """The running session; RuntimeError before ``init()`` or after ``shutdown()``."""
    if _state is None:
        raise RuntimeError("theanompi.multiverso is not initialised: call mv.init() first")
    return _state


def init(sync: bool = False, updater: str = "add", lr: float = 0.1, momentum: float = 0.9) -> None:
    """Start the parameter server (collective). ``updater`` is the default of new tables:
    one of add, sgd, momentum, adagrad (``lr``/``momentum`` are their hyper-parameters)."""
    global _state
    if _state is not None:
        raise RuntimeError("theanompi.multiverso is already initialised")
    if updater not in UPDATERS:
        raise ValueError(f"updater={updater!r} is not allowed; use one of: {', '.join(UPDATERS)}")
    _state = _Session(bool(sync), updater, float(lr), float(momentum))


def shutdown() -> None:
    """Stop the parameter server (collective); every table handler becomes unusable."""
    global _state
    session().close()
    _state = None


def barrier() -> None:
    """Block until every worker has called ``barrier``."""
    session().comm.Barrier()


def workers_num() -> int:
    return session().comm.size


def worker_id() -> int:
    return session().comm.rank


def is_master_worker() -> bool:
    """True on worker 0: initialise, validate and print there."""
    return worker_id() == 0
