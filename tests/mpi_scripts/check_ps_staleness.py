"""Under mpiexec (S servers + 2 clients): each ASGD_STALENESS mode of the real server against a NumPy replay.

Ranks 0..S-1 are servers (S = argv[1]), ranks S and S+1 the clients A and B. The clients pull and push
out of step in a fixed order (every push acknowledged, barriers between), so each push's staleness is
known; a push to the rows of one server only leaves the servers' versions apart. For every mode and
updater, A checks the table against a replay of the same events with the formulas of
theanompi.comm.ps.staleness written out in NumPy, shard by shard (each push's staleness counted there).
"""

import sys

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.ps.client import PSClient
from theanompi.comm.ps.protocol import shard_bounds
from theanompi.comm.ps.server import TableServer
from theanompi.comm.ps.staleness import MEAN_SQUARE_DECAY

n_servers = int(sys.argv[1])
world = MPI.COMM_WORLD
servers = list(range(n_servers))
clients = list(range(n_servers, world.size))
assert len(clients) == 2, "two clients: A and B"
is_server = world.rank in servers
workers = world.Split(0 if is_server else 1, world.rank)

if is_server:
    TableServer(world, clients, servers.index(world.rank), n_servers, sync=False).serve()
    sys.exit(0)

A, B = 0, 1
me = workers.rank
client = PSClient(world, servers)
ROWS, LR, MU, LAM0 = 7, 0.1, 0.5, 1.5
bounds = shard_bounds(ROWS, n_servers)
rng = np.random.default_rng(0)
init = rng.standard_normal((ROWS, 1))
first_rows = np.arange(*bounds[0])  # the rows of server 0 alone
pushes = [rng.standard_normal((ROWS, 1)) for _ in range(5)] + [rng.standard_normal((len(first_rows), 1))
                                                                for _ in range(2)]
# (who, what, push index, rows): pulls and pushes out of step
EVENTS = [(A, "set", None, None), (A, "get", None, None), (B, "get", None, None), (B, "add", 0, None),
          (A, "add", 1, None), (A, "get", None, None), (A, "add", 2, None), (B, "add", 3, None),
          (B, "add", 5, first_rows), (B, "add", 6, first_rows),
          (A, "get", None, None), (A, "add", 4, None), (B, "get", None, None),
          (A, "get", None, None)]


def replay(mode: str, updater: str):
    """NumPy: the final values, shard by shard (each server counts its own versions)."""
    values = np.empty((ROWS, 1))
    for start, stop in bounds:
        w, velocity, ms = np.zeros((stop - start, 1)), np.zeros((stop - start, 1)), np.zeros((stop - start, 1))
        version = 0
        seen, backup = {}, {}
        for who, what, index, rows in EVENTS:
            if what == "set":
                w, version = init[start:stop].copy(), version + 1
            elif what == "get":
                seen[who], backup[who] = version, w.copy()
            else:
                local = np.arange(stop - start) if rows is None else rows[(rows >= start) & (rows < stop)] - start
                if local.size == 0:
                    continue
                p = (pushes[index][start:stop] if rows is None else pushes[index][(rows >= start) & (rows < stop)])
                tau = version - seen[who]
                if mode == "scale":
                    p = p / max(1, tau)
                elif mode == "compensate":
                    ms[local] = MEAN_SQUARE_DECAY * ms[local] + (1 - MEAN_SQUARE_DECAY) * p ** 2
                    sign = -1.0 if updater == "add" else 1.0
                    p = p + sign * LAM0 * p ** 2 / (np.sqrt(ms[local]) + 1e-8) * (w[local] - backup[who][local])
                if updater == "add":
                    w[local] += p
                elif updater == "sgd":
                    w[local] -= LR * p
                else:
                    velocity[local] = MU * velocity[local] + p
                    w[local] -= LR * velocity[local]
                version += 1
        values[start:stop] = w
    return values


table_id = 0
for mode in ("none", "scale", "compensate"):
    for updater in ("add", "sgd", "momentum"):
        table = client.create_table(table_id, ROWS, 1, "float64", updater=updater, lr=LR, momentum=MU,
                                    staleness=mode, dc_lambda=LAM0)
        table_id += 1
        workers.Barrier()
        for who, what, index, rows in EVENTS:
            if who == me:
                if what == "set":
                    client.set(table, init)
                elif what == "get":
                    got = client.get(table)
                else:
                    client.add(table, pushes[index], rows=rows, sync=True)
            workers.Barrier()
        if me == A:
            expected = replay(mode, updater)
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12, err_msg=f"{mode} {updater}")
workers.Barrier()
if me == A:
    print(f"staleness ok ({n_servers} servers, 2 clients)", flush=True)
client.done(wait=True)
