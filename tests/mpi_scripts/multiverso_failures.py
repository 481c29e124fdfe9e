"""One worker fails in a Multiverso-style session; every worker must end within seconds (no hang).

argv[1]: the scenario; argv[2]: the failing worker (default 1). The other workers
carry on as a correct script would (barrier, get, shutdown) and are ended by
the failing one. No `_abort_on_error` here: theanompi.multiverso's own guards are tested.

| scenario              | the failing worker ...                                       |
|-----------------------|--------------------------------------------------------------|
| raise_between_barriers| raises an uncaught exception between two barriers            |
| raise_after_pytensor  | the same after importing pytensor (it replaces excepthook)    |
| exit_after_init       | leaves with sys.exit(1) after mv.init (others in barrier)    |
| raise_before_init     | raises after importing theanompi.multiverso, before mv.init  |
| never_init            | exits (status 0) without importing theanompi.multiverso: the |
|                       | others time out in mv.init (THEANOMPI_MV_TIMEOUT)            |
| exit_before_init      | starts MPI, exits (status 0) before mv.init: others time out |
| shutdown_in_barrier   | calls mv.shutdown() while the others wait in mv.barrier()    |
| get_vs_barrier        | sync server: waits in a get while the others are in barrier  |
"""

import os
import sys

scenario = sys.argv[1]
failing = int(sys.argv[2]) if len(sys.argv) > 2 else 1
me = int(os.environ["OMPI_COMM_WORLD_RANK"])  # the launcher's rank: known before MPI starts

if scenario == "never_init" and me == failing:
    sys.exit(0)  # a non-zero status would make mpiexec end the job itself
if scenario == "exit_before_init" and me == failing:
    from mpi4py import MPI  # MPI started, then this worker leaves without mv.init

    sys.exit(0)

import numpy as np  # noqa: E402

import theanompi.multiverso as mv  # noqa: E402

if scenario == "raise_before_init" and me == failing:
    from mpi4py import MPI  # noqa: F401 - MPI started: a plain non-zero exit would not end the others

    raise RuntimeError("broken before init")

mv.init(sync=scenario == "get_vs_barrier")
table = mv.ArrayTableHandler(5, init_value=np.zeros(5))
mv.barrier()
if me == failing:
    if scenario == "raise_between_barriers":
        raise ValueError("broken between barriers")
    if scenario == "raise_after_pytensor":  # pytensor replaces sys.excepthook with its own
        import pytensor  # noqa: F401

        raise ValueError("broken after importing pytensor")
    if scenario == "exit_after_init":
        sys.exit(1)
    if scenario == "shutdown_in_barrier":
        mv.shutdown()
        sys.exit(0)
    if scenario == "get_vs_barrier":
        table.get()
table.add(np.ones(5))
mv.barrier()
table.get()
mv.barrier()
mv.shutdown()
print(f"worker {me} finished normally", flush=True)
