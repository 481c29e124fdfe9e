"""Multiverso's process API on theanompi's parameter server.

Run a script under ``mpiexec -n N python script.py`` (or as one plain process):
every process is a worker; the parameter server runs as a thread of worker 0
(the master) and talks MPI over its own communicator. Nothing here imports
pytensor, jax or CuPy, so ``mv.worker_id()`` can pick a GPU before they load.

Blocking behaviour
------------------
* ``init`` and ``shutdown`` are collective: every worker must call them.
* ``barrier`` blocks until every worker has called it, and every ``add`` any
  worker issued before its barrier is applied before any worker leaves it
  (async and sync servers), so a ``get`` after a barrier sees all of them.
* ``get`` always waits for the values. ``add(..., sync=False)`` returns once the
  delta is handed to MPI; ``add(..., sync=True)`` waits until it is applied.
* Async server (``init(sync=False)``, the default): adds apply as they arrive,
  gets return the current values; no ordering between workers outside barriers.
* Sync server (``init(sync=True)``): every worker must call add/get on a table in
  the same order and number; each worker's i-th ``get`` blocks until every
  worker has asked for its i-th get and returns identical values.

Failures end every worker within seconds (see :mod:`theanompi.multiverso.guards`):
an uncaught exception, ``sys.exit`` without ``shutdown``, a worker that never
calls ``init`` (``THEANOMPI_MV_TIMEOUT``), a worker that shuts down while others
wait in a barrier or a sync get, or barriers and sync gets that can never match
(the waiting workers get an error naming who waits for what).

Example
-------
>>> import theanompi.multiverso as mv
>>> mv.init()                                                   # doctest: +SKIP
>>> t = mv.ArrayTableHandler(4, init_value=np.ones(4))          # doctest: +SKIP
>>> mv.barrier(); t.get()                                       # doctest: +SKIP
array([1., 1., 1., 1.], dtype=float32)
>>> mv.shutdown()                                               # doctest: +SKIP

Multiverso's command-line flags work too:

>>> parse_flags([b"", b"-sync=true", b"-updater_type=momentum_sgd", b"-omp_threads=4"])
{'sync': True, 'updater': 'momentum'}
"""

from __future__ import annotations

import logging
import threading

from theanompi.comm.ps.updaters import UPDATERS
from theanompi.core.options import InvalidValue, boolean, choice, positive_float, unit_interval
from theanompi.multiverso.guards import SessionGuard, arrival_timeout, await_every_worker, serve_or_abort, start_mpi

log = logging.getLogger(__name__)

_state = None

UPDATER_ALIASES = {"default": "add", "momentum_sgd": "momentum"}  # Multiverso's -updater_type names
IGNORED_FLAGS = ("omp_threads", "allocator_alignment", "allocator_type", "logtostderr", "machine_file", "port")


class _Session:
    """One running session: communicators, the client, the server thread (worker 0) and the defaults of new tables."""

    def __init__(self, world, comm, client, server_thread, sync: bool, updater: str, lr: float, momentum: float,
                 guard: SessionGuard):
        self.world, self.comm, self.client, self.server_thread = world, comm, client, server_thread
        self.sync, self.updater, self.lr, self.momentum = sync, updater, lr, momentum
        self.next_table = 0
        self.barriers = 0
        self.guard = guard

    def new_table_id(self) -> int:
        self.next_table += 1
        return self.next_table - 1


def session() -> _Session:
    """The running session; RuntimeError before ``init()`` or after ``shutdown()``."""
    if _state is None:
        raise RuntimeError("theanompi.multiverso is not initialised: call mv.init() first")
    return _state


def parse_flags(args) -> dict:
    """Multiverso's ``-name=value`` flags (str or bytes) as ``init`` keywords; other entries (argv[0]) are skipped."""
    options = {}
    for arg in args:
        text = arg.decode() if isinstance(arg, bytes) else str(arg)
        if not text.startswith("-"):
            continue
        name, has_value, value = text.lstrip("-").partition("=")
        if not has_value:
            raise ValueError(f"Multiverso flag {text!r} is not allowed; write -name=value")
        if name == "sync":
            options["sync"] = _parsed(f"Multiverso flag {text!r}", boolean, value)
        elif name == "updater_type":
            options["updater"] = UPDATER_ALIASES.get(value, value)
        elif name in IGNORED_FLAGS:
            log.debug("Multiverso flag %s has no meaning here; ignored", text)
        else:
            raise ValueError(f"Multiverso flag {text!r} is not supported; use -sync=, -updater_type= "
                             f"(accepted and ignored: {', '.join(IGNORED_FLAGS)})")
    return options


def _parsed(what: str, parse, value):
    """``parse(value)``, or ValueError naming ``what`` and what is allowed (Multiverso raises ValueError)."""
    try:
        return parse(value)
    except InvalidValue as err:
        raise ValueError(f"{what} is not allowed; {err}") from None


def init(sync=False, updater: str | None = None, lr: float | None = None, momentum: float = 0.9,
         args=None) -> None:
    """Start the parameter server (collective).

    Parameters
    ----------
    sync : bool
        Sync server (identical gets, see the module notes) or async server (default).
        A list here is taken as Multiverso's older ``init(args)``: flags such as ``-sync=true``.
    updater : str
        Default updater of new tables: add (Multiverso's ``default``), sgd, momentum
        (``momentum_sgd``), adagrad; ``lr``/``momentum`` are their hyper-parameters.
        ``lr`` defaults to 0.1, or to 1.0 for ``-updater_type=sgd`` (Multiverso's sgd subtracts the delta).
    args : list of str or bytes
        Multiverso's flags: ``-sync=true|false``, ``-updater_type=...``; flags of
        Multiverso's C++ runtime (threads, allocator, port, ...) are accepted and ignored.
    """
    global _state
    if _state is not None:
        raise RuntimeError("theanompi.multiverso is already initialised")
    if isinstance(sync, (list, tuple)):
        sync, args = False, list(sync) + list(args or [])
    flags = parse_flags(args or [])
    sync = _parsed(f"sync={sync!r}", boolean, flags.get("sync", sync))
    chosen = (updater and UPDATER_ALIASES.get(updater, updater)) or flags.get("updater", "add")
    chosen = _parsed(f"updater={chosen!r}", choice(*UPDATERS), chosen)
    if lr is None:
        lr = 1.0 if updater is None and flags.get("updater") == "sgd" else 0.1
    lr = _parsed(f"lr={lr!r}", positive_float, lr)
    momentum = _parsed(f"momentum={momentum!r}", unit_interval, momentum)
    timeout = arrival_timeout()
    _state = _start(sync, chosen, lr, momentum, timeout)


def _start(sync: bool, updater: str, lr: float, momentum: float, timeout: float) -> _Session:
    MPI = start_mpi(timeout)  # mpi4py's module name

    from theanompi.comm.ps.client import PSClient  # noqa: PLC0415 - imports mpi4py, which starts MPI: at mv.init
    from theanompi.comm.ps.server import TableServer  # noqa: PLC0415 - imports mpi4py, which starts MPI: at mv.init

    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise RuntimeError("theanompi.multiverso needs an MPI library with MPI_THREAD_MULTIPLE")
    world = MPI.COMM_WORLD
    await_every_worker(world, timeout)
    comm = world.Dup()  # parameter-server traffic stays off the user's communicator
    server_thread = None
    if comm.rank == 0:
        server = TableServer(comm, list(range(comm.size)), 0, 1, sync=sync)
        server_thread = threading.Thread(target=serve_or_abort, args=(server, world), name="theanompi-ps",
                                         daemon=True)
        server_thread.start()
    state = _Session(world, comm, PSClient(comm, [0]), server_thread, sync, updater, lr, momentum,
                     guard=SessionGuard(world, close_alone=shutdown))
    state.guard.install()
    return state


def shutdown() -> None:
    """Stop the parameter server (collective: returns once every worker has called it);
    every table handler becomes unusable. Without a running session (a second call, or no ``init``)
    it does nothing, as Multiverso's.

    >>> shutdown(); shutdown()
    """
    global _state
    state = _state
    if state is None:
        return
    state.client.done(wait=True)  # a barrier or sync get another worker waits in then fails instead of hanging
    if state.server_thread is not None:
        state.server_thread.join()
    state.comm.Free()
    state.guard.uninstall()
    _state = None


def barrier() -> None:
    """Block until every worker has called ``barrier``; every add issued before it is applied by then."""
    state = session()
    state.barriers += 1
    state.client.barrier(state.barriers)


def workers_num() -> int:
    """Number of workers (MPI ranks)."""
    return session().comm.size


def worker_id() -> int:
    """This worker's id, 0 .. workers_num() - 1."""
    return session().comm.rank


def server_id() -> int:
    """This process's server id: 0 on worker 0 (which runs the server thread), -1 elsewhere."""
    return 0 if session().server_thread is not None else -1


def is_master_worker() -> bool:
    """True on worker 0: initialise, validate and print there."""
    return worker_id() == 0
