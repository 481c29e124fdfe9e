"""Under mpiexec (>= 3 ranks): the parameter server against numpy references.

Ranks 0..S-1 are servers (S = argv[2]), the rest clients. argv[1] is the mode: async | sync.
"""

import sys
import time

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.ps.client import PSClient, ServerError
from theanompi.comm.ps.server import TableServer
from theanompi.comm.ps.updaters import make_updater

mode, n_servers = sys.argv[1], int(sys.argv[2])
world = MPI.COMM_WORLD
servers = list(range(n_servers))
clients = list(range(n_servers, world.size))
is_server = world.rank in servers
workers = world.Split(0 if is_server else 1, world.rank)

if is_server:
    TableServer(world, clients, servers.index(world.rank), n_servers, sync=(mode == "sync")).serve()
    sys.exit(0)

me, n = workers.rank, workers.size
client = PSClient(world, servers)
rng = np.random.default_rng(me)

# -- add sums exactly; master initialisation; row gets --------------------------------
t = client.create_table(0, num_row=11, num_col=3, dtype="float64", updater="add")
init = np.arange(33, dtype=np.float64).reshape(11, 3)
if me == 0:
    client.set(t, init)
workers.Barrier()
np.testing.assert_array_equal(client.get(t), init)
workers.Barrier()  # everyone has read the initial values before anyone adds
deltas = [np.random.default_rng(c).integers(-9, 9, (11, 3)).astype(np.float64) for c in range(n)]
client.add(t, deltas[me], sync=True)
workers.Barrier()
expected = init + sum(deltas)
np.testing.assert_array_equal(client.get(t), expected)
rows = [10, 0, 5, 5]
np.testing.assert_array_equal(client.get(t, rows=rows), expected[rows])
workers.Barrier()
# row adds
client.add(t, np.ones((2, 3)), rows=[1, 9], sync=True)
workers.Barrier()
expected[[1, 9]] += n
np.testing.assert_array_equal(client.get(t), expected)

# -- updaters keep state across pushes (one client pushes, others watch) --------------
for code, name in enumerate(["sgd", "momentum", "adagrad"], start=1):
    tab = client.create_table(code, num_row=5, num_col=1, dtype="float64", updater=name, lr=0.1, momentum=0.5)
    reference = np.zeros((5, 1))
    ref_updater = make_updater(name, (5, 1), np.float64, lr=0.1, momentum=0.5)
    for step in range(4):
        d = np.random.default_rng(step).standard_normal((5, 1))
        ref_updater.apply(reference, d)
        if me == 0:
            client.add(tab, d, sync=True)
    workers.Barrier()
    np.testing.assert_allclose(client.get(tab), reference, rtol=1e-12)

# -- misuse gives clear errors ---------------------------------------------------------
try:
    client.add(t, np.ones(5))
except ValueError as err:
    assert "got 5 values for 11 rows of 3" in str(err)
else:
    raise AssertionError("size mismatch accepted")
try:
    client.get(t, rows=[11])
except IndexError as err:
    assert "row id 11 is outside 0..10" in str(err)
else:
    raise AssertionError("bad row accepted")
try:
    client.create_table(0, num_row=12, num_col=3, dtype="float64")
except ServerError as err:
    assert "table 0: this worker asked for (12, 3)" in str(err), err
else:
    raise AssertionError("shape mismatch accepted")

# -- sync mode: every client's i-th get is identical despite random delays -----------
if mode == "sync":
    s = client.create_table(9, num_row=1000, num_col=1, dtype="float32")
    seen = []
    for _ in range(20):
        time.sleep(rng.uniform(0, 0.01))
        client.add(s, rng.standard_normal((1000, 1)).astype("float32"))
        seen.append(client.get(s))
    gathered = workers.allgather(np.stack(seen))
    for other in gathered[1:]:
        np.testing.assert_array_equal(other, gathered[0])
    # a mismatched extra get is reported instead of hanging
    workers.Barrier()
    if me == 0:
        try:
            client.get(s)
        except ServerError as err:
            assert "sync mode" in str(err) and "must call add/get in the same order" in str(err), err
            print("sync mismatch detected:", err)
        else:
            raise AssertionError("mismatched sync get was answered")
    else:
        client.done()
else:
    # async: a slow client does not hold back a fast one
    a = client.create_table(9, num_row=4, num_col=1, dtype="float32")
    workers.Barrier()
    if me == 0:
        time.sleep(1.0)
    else:
        start = time.perf_counter()
        for _ in range(50):
            client.add(a, np.ones((4, 1), "float32"))
            client.get(a)
        assert time.perf_counter() - start < 0.9, "async progress blocked by a slow client"
    workers.Barrier()
    assert client.get(a)[0, 0] == 50 * (n - 1)
    stats = client.stats()
    assert all(s["adds"] for s in stats)
client.done()
if me == 0:
    print(f"ps ok ({mode}, {n_servers} servers, {n} clients)")
