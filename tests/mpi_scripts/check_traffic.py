"""Under mpiexec: what the exchangers and the parameter server count as sent (theanompi.comm.traffic), printed per
rank as one JSON line, for tests/sessions/test_traffic.py to hold against Open MPI's own count of the bytes each
rank sent (its pml ``monitoring`` component).

``check_traffic.py exchangers`` (2 ranks): sums (blocking and not), broadcasts, the fp16 allreduce.
``check_traffic.py ps`` (3 ranks: clients 0 and 1, server 2): a table made, set, added to, read, a barrier.
"""

import json
import sys

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.exchange import make_exchanger

comm = MPI.COMM_WORLD
part = sys.argv[1]
if part == "exchangers":
    plain, half = make_exchanger("ar", comm), make_exchanger("ar16", comm)
    x = np.ones(250_000, np.float32)  # 1 MB
    plain.allreduce_sum(x)
    plain.start_allreduce_sum(x).wait()
    plain.bcast(x, root=0)
    half.allreduce_sum(np.ones(100_001, np.float32))
    half.bcast(np.ones(1000, np.float32), root=1)
    counted = plain.sent.total + half.sent.total
else:
    from theanompi.comm.ps.client import PSClient
    from theanompi.comm.ps.server import TableServer

    if comm.rank == 2:
        server = TableServer(comm, clients=[0, 1], server_index=0, n_servers=1, sync=False)
        server.serve()
        counted = server.sent.total
    else:
        client = PSClient(comm, servers=[2])
        table = client.create_table(0, num_row=10_000, num_col=1, dtype="float32", updater="add")
        if comm.rank == 0:
            client.set(table, np.zeros(10_000, np.float32))
        client.barrier(1)
        for _ in range(3):
            client.add(table, np.ones(10_000, np.float32))
            client.get(table)
        client.add(table, np.ones(10, np.float32), rows=np.arange(10))
        client.barrier(2)
        client.done(wait=True)
        counted = client.sent.total
print(json.dumps({"rank": comm.rank, "counted": counted}), flush=True)
