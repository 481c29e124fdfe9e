"""Under mpiexec (1-4 ranks) or as a plain process: theanompi.multiverso against numpy references.

argv[1]: async | sync
"""

import sys
import time

import _abort_on_error  # noqa: F401
import numpy as np

import theanompi.multiverso as mv

mode = sys.argv[1]
try:
    mv.workers_num()
except RuntimeError as err:
    assert "call mv.init() first" in str(err)
else:
    raise AssertionError("use before init accepted")

mv.init(sync=(mode == "sync"))
n, me = mv.workers_num(), mv.worker_id()
assert mv.is_master_worker() == (me == 0)

# master initialisation: only the master's init_value lands on the server
t = mv.ArrayTableHandler(7, init_value=np.full(7, 10.0 + me))
mv.barrier()
np.testing.assert_array_equal(t.get(), np.full(7, 10.0, np.float32))
mv.barrier()

# add/get sums exactly (numpy, buffer protocol, lists)
deltas = [np.arange(7, dtype=np.float64) * (w + 1) for w in range(n)]
t.add(deltas[me], sync=True)
mv.barrier()
expected = (10.0 + sum(deltas)).astype(np.float32)
np.testing.assert_array_equal(t.get(), expected)
mv.barrier()
t.add(memoryview(np.ones(7, np.float32)), sync=True)
t.add([0.5] * 7, sync=True)
mv.barrier()
np.testing.assert_array_equal(t.get(), expected + 1.5 * n)
mv.barrier()

# matrix tables: whole and row-wise
m = mv.MatrixTableHandler(5, 3, init_value=np.arange(15).reshape(5, 3))
mv.barrier()
m.add(np.ones((2, 3)), row_ids=[4, 1], sync=True)
mv.barrier()
ref = np.arange(15, dtype=np.float32).reshape(5, 3)
ref[[4, 1]] += n
np.testing.assert_array_equal(m.get(), ref)
np.testing.assert_array_equal(m.get(row_ids=[1, 4, 1]), ref[[1, 4, 1]])
mv.barrier()

# server-side updater state persists (sgd with lr 0.1 on its own table)
s = mv.ArrayTableHandler(3, init_value=np.zeros(3), updater="sgd")
mv.barrier()
s.add(np.ones(3), sync=True)
mv.barrier()
np.testing.assert_allclose(s.get(), np.full(3, -0.1 * n), rtol=1e-6)
mv.barrier()

# misuse: clear errors
for bad, kind, fragment in [
    (lambda: t.add(np.ones(6)), ValueError, "data has 6 values; the table expects 7"),
    (lambda: t.add(np.array(["a"] * 7)), TypeError, "must be numeric"),
    (lambda: m.get(row_ids=[5]), IndexError, "row id 5 is outside 0..4"),
    (lambda: mv.ArrayTableHandler(0), ValueError, "positive integer"),
    (lambda: mv.ArrayTableHandler(3, updater="nesterov"), ValueError, "updater='nesterov' is not allowed"),
]:
    try:
        bad()
    except kind as err:
        assert fragment in str(err), (fragment, err)
    else:
        raise AssertionError(f"accepted: {fragment}")

if mode == "sync":
    # each worker's i-th get returns identical values despite random delays
    q = mv.ArrayTableHandler(100)
    rng = np.random.default_rng(me)
    seen = []
    for _ in range(10):
        time.sleep(rng.uniform(0, 0.01))
        q.add(rng.standard_normal(100))
        seen.append(q.get())
    from mpi4py import MPI

    gathered = MPI.COMM_WORLD.allgather(np.stack(seen))
    for other in gathered[1:]:
        np.testing.assert_array_equal(other, gathered[0])
else:
    # async: progress while another worker is slow
    a = mv.ArrayTableHandler(4, init_value=np.zeros(4))
    mv.barrier()
    if me == 0 and n > 1:
        time.sleep(1.0)
    else:
        start = time.perf_counter()
        for _ in range(30):
            a.add(np.ones(4))
            a.get()
        assert time.perf_counter() - start < 0.9, "a slow worker blocked async progress"
    mv.barrier()
mv.shutdown()
try:
    t.get()
except RuntimeError as err:
    assert "shut down" in str(err)
else:
    raise AssertionError("table usable after shutdown")
if me == 0:
    print(f"multiverso ok ({mode}, {n} workers)")
