"""Under mpiexec (6 ranks): a table saved from 3 servers and restored onto 2 -- its rows and the momentum updater's
state -- is bit-identical, and both server sets then apply the same push to the same values.

Ranks 0..2 are the 3 servers of table set A, ranks 3..4 the 2 servers of set B, rank 5 the client of both. The
client trains A's table (momentum, pushes of random deltas), exports it (PSClient.export_table), imports it into B
(import_table) and exports B's: the values, the velocity and the virtual partitions must be identical; one more
push to each must leave them identical too (the momentum was carried, not restarted).
"""

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.ps.client import PSClient
from theanompi.comm.ps.protocol import partition_bounds, shard_bounds
from theanompi.comm.ps.server import TableServer

world = MPI.COMM_WORLD
assert world.size == 6, "3 + 2 servers and a client"
A, B, CLIENT = [0, 1, 2], [3, 4], 5
if world.rank in A:
    TableServer(world, [CLIENT], A.index(world.rank), len(A), sync=False).serve()
elif world.rank in B:
    TableServer(world, [CLIENT], B.index(world.rank), len(B), sync=False).serve()
else:
    ROWS = 1003  # 256 virtual partitions of 3 or 4 rows
    for servers in (A, B):  # every server holds whole partitions
        starts = {start for start, _ in partition_bounds(ROWS)} | {ROWS}
        assert all(start in starts and stop in starts for start, stop in shard_bounds(ROWS, len(servers)))
    rng = np.random.default_rng(7)
    on_a, on_b = PSClient(world, A), PSClient(world, B)
    hyper = dict(num_row=ROWS, num_col=1, dtype="float32", updater="momentum", lr=0.1, momentum=0.9)
    table_a, table_b = on_a.create_table(0, **hyper), on_b.create_table(0, **hyper)
    on_a.set(table_a, rng.standard_normal((ROWS, 1)).astype("float32"))
    for _ in range(5):
        on_a.add(table_a, rng.standard_normal((ROWS, 1)).astype("float32"), sync=True)
    saved = on_a.export_table(table_a)
    assert set(saved["state"]) == {"velocity"} and np.abs(saved["state"]["velocity"]).sum() > 0
    on_b.import_table(table_b, saved)
    back = on_b.export_table(table_b)
    assert back["partitions"] == saved["partitions"] == partition_bounds(ROWS)
    assert np.array_equal(back["values"], saved["values"])
    assert np.array_equal(back["state"]["velocity"], saved["state"]["velocity"])
    push = rng.standard_normal((ROWS, 1)).astype("float32")
    on_a.add(table_a, push, sync=True)
    on_b.add(table_b, push, sync=True)
    assert np.array_equal(on_a.get(table_a), on_b.get(table_b))
    on_a.done()
    on_b.done()
    print("repartitioned: 3 servers -> 2, bit for bit")
