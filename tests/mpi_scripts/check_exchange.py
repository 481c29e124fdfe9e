"""Under mpiexec: the fused-buffer exchanger against numpy sums, odd sizes, several dtypes."""

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.exchange import make_exchanger

comm = MPI.COMM_WORLD
ex = make_exchanger("ar", comm)
for dtype in ("float32", "float64", "int32", "int64", "float16"):
    for size in (1, 7, 1023, 100_003):
        per_rank = [np.random.default_rng([r, size]).integers(-50, 50, size).astype(dtype) for r in range(comm.size)]
        expected = np.sum(np.stack(per_rank).astype("float64"), axis=0)
        buf = per_rank[comm.rank].copy()
        out = ex.allreduce_sum(buf)
        assert out is buf, "allreduce must work in place"
        np.testing.assert_allclose(buf.astype("float64"), expected, rtol=0, atol=0, err_msg=f"{dtype} {size}")
        if np.issubdtype(np.dtype(dtype), np.floating):
            buf = per_rank[comm.rank].copy()
            ex.allreduce_mean(buf)
            tol = 1e-2 if dtype == "float16" else 1e-6
            np.testing.assert_allclose(buf, expected / comm.size, rtol=tol, atol=tol)
        root_value = per_rank[comm.size - 1].copy()
        buf = per_rank[comm.rank].copy()
        ex.bcast(buf, root=comm.size - 1)
        np.testing.assert_array_equal(buf, root_value)
try:
    ex.allreduce_sum(np.zeros((2, 2)))
except ValueError as err:
    assert "contiguous 1-D" in str(err)
else:
    raise AssertionError("2-D buffer accepted")
if comm.rank == 0:
    print("exchange ok on", comm.size, "ranks")
