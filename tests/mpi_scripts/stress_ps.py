"""Under mpiexec: the parameter-server protocol many times over, with random delays on every rank.

Rank 0 serves; the others push random numbers of adds (async) or equal numbers (sync) with random
sleeps; every repetition must end (all DONE) with the table equal to the exact sum of all adds.
"""

import sys
import time

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.ps.client import PSClient
from theanompi.comm.ps.server import TableServer

reps, mode = int(sys.argv[1]), sys.argv[2]
world = MPI.COMM_WORLD
workers = world.Split(0 if world.rank == 0 else 1, world.rank)
for rep in range(reps):
    world.Barrier()  # one server lifetime per repetition
    if world.rank == 0:
        time.sleep(np.random.default_rng([rep]).uniform(0, 0.005))
        TableServer(world, list(range(1, world.size)), 0, 1, sync=(mode == "sync")).serve()
        continue
    rng = np.random.default_rng([rep, world.rank])
    client = PSClient(world, [0])
    table = client.create_table(0, num_row=257, num_col=1, dtype="float64")
    n_adds = 10 if mode == "sync" else int(rng.integers(1, 30))
    for _ in range(n_adds):
        time.sleep(rng.uniform(0, 0.003))
        client.add(table, np.ones((257, 1)))
        client.get(table)
    total = workers.allreduce(n_adds)
    workers.Barrier()
    client.add(table, np.zeros((257, 1)), sync=True)
    workers.Barrier()
    values = client.get(table)
    assert np.all(values == total), (rep, values[0], total)
    client.done()
if world.rank == 1:
    print(f"stress ok: {reps} repetitions ({mode})")
