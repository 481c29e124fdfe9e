"""Under mpiexec (2 servers + 3 clients): bounded staleness (ASGD_MAX_STALENESS), scheduled learning rates and the
table's moving average through real servers.

1. Bound: client 0 is slow (a pause before each of its pulls), clients 1 and 2 are fast; every client pushes and
   pulls K times with its clock. Each reply a client gets at clock k > S must come after every other client sent a
   pull with clock >= k - S (all start at 0): checked on the monotonic clock all processes of this host share.
   Then client 0 says it is idle and waits in a barrier, while the others run K more steps (were they held, none
   would end).
2. Average and rate: an ``sgd`` table; each client's adds carry a learning rate and the average's decay; with the
   adds acknowledged in a fixed order (barriers between), the table and its average equal a NumPy replay.
"""

import time

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.ps.client import PSClient
from theanompi.comm.ps.protocol import CLOCK_IDLE
from theanompi.comm.ps.server import TableServer

S, K, PAUSE = 2, 12, 0.05
world = MPI.COMM_WORLD
servers, clients = [0, 1], [2, 3, 4]
is_server = world.rank in servers
workers = world.Split(0 if is_server else 1, world.rank)
if is_server:
    TableServer(world, clients, servers.index(world.rank), len(servers), sync=False, max_staleness=S).serve()
    raise SystemExit(0)

me = workers.rank
client = PSClient(world, servers)
table = client.create_table(0, num_row=5, num_col=1, dtype="float64", updater="add")
if me == 0:
    client.set(table, np.zeros(5))
workers.Barrier()
sent, replies = [], []
for step in range(1, K + 1):
    client.add(table, np.ones(5))
    if me == 0:
        time.sleep(PAUSE)
    sent.append((step, time.monotonic()))
    client.get(table, clock=step)
    replies.append((step, time.monotonic()))
client.clock(CLOCK_IDLE)
logs = workers.gather((sent, replies), root=0)
if me == 0:
    for c, (_, got) in enumerate(logs):
        for clock, at in got:
            if clock <= S:
                continue  # every client starts at clock 0
            for other, (other_sent, _) in enumerate(logs):
                if other != c:
                    caught_up = [t for k, t in other_sent if k >= clock - S]
                    assert caught_up and min(caught_up) <= at, (c, clock, other)
    # the fast clients were held: their K-th reply came after client 0 sent clock K - S
    assert all(logs[c][1][-1][1] >= dict(logs[0][0])[K - S] for c in (1, 2))
workers.Barrier()
if me != 0:  # client 0 is idle (and waits in the barrier below): held pulls would never be answered
    for step in range(K + 1, 2 * K + 1):
        client.add(table, np.ones(5))
        client.get(table, clock=step)
workers.Barrier()

# 2. the rate and the average, in a fixed order
sgd = client.create_table(1, num_row=5, num_col=1, dtype="float64", updater="sgd", lr=1.0)
rng = np.random.default_rng(7)
init, pushes = rng.standard_normal((5, 1)), [rng.standard_normal((5, 1)) for _ in range(6)]
rates, decays = [0.5, 0.25, 0.125, 0.1, 0.05, 0.01], [0.0, 0.9, 0.8, 0.95, 0.5, 0.7]
if me == 0:
    client.set(sgd, init)
    client.set(sgd, init, average=True)
workers.Barrier()
for i, (push, lr, decay) in enumerate(zip(pushes, rates, decays)):
    if i % 3 == me:
        client.add(sgd, push, sync=True, lr=lr, decay=decay)
    workers.Barrier()
values, average = init.copy(), init.copy()
for push, lr, decay in zip(pushes, rates, decays):
    values = values - lr * push
    average = decay * average + (1 - decay) * values
np.testing.assert_allclose(client.get(sgd), values, rtol=1e-12)
np.testing.assert_allclose(client.get(sgd, average=True), average, rtol=1e-12)
workers.Barrier()
client.done(wait=True)
if me == 0:
    print("bounded staleness, rates and averages: OK", flush=True)
