"""Under mpiexec, on host buffers: the fp16 allreduce (ar16) against float64 numpy sums and its error bound;
cudampi's detection and its host-staged path. Prints the worst error relative to the bound."""

import logging
import sys

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.exchange import make_exchanger
from theanompi.comm.exchange.cudampi import CudaMPIExchanger, MPIStaging, cuda_aware_mpi
from theanompi.comm.exchange.fp16 import U16, error_bound

comm = MPI.COMM_WORLD
n = comm.size
ex = make_exchanger("ar16", comm)
worst = 0.0  # max |error| / bound
loose = 0.0  # max |error| / (u16 * sum |x|): shows fp16 really was on the wire
for size in (1, n - 1, 7, 1000, 100_003):
    for scale in (1e-3, 1.0, 300.0):
        per_rank = [(np.random.default_rng([r, size, int(scale * 1000)]).standard_normal(size) * scale)
                    .astype("float32")
                    for r in range(n)]
        stacked = np.stack(per_rank).astype("float64")
        exact, abs_sum = stacked.sum(axis=0), np.abs(stacked).sum(axis=0)
        buf = per_rank[comm.rank].copy()
        out = ex.allreduce_sum(buf)
        assert out is buf and buf.dtype == np.float32, "fp16 allreduce must work in place on the float32 buffer"
        err = np.abs(buf.astype("float64") - exact)
        bound = error_bound(abs_sum, n)
        assert np.all(err <= bound), f"size {size} scale {scale}: error {err.max()} above bound"
        if size:
            worst = max(worst, float((err / bound).max()))
            loose = max(loose, float((err / (U16 * abs_sum + 1e-30)).max()))
        every = comm.allgather(buf.tobytes())
        assert all(e == every[0] for e in every), "ranks disagree on the fp16 sum"
root_value = np.arange(5, dtype="float32") / 3
buf = root_value.copy() if comm.rank == n - 1 else np.zeros(5, "float32")
ex.bcast(buf, root=n - 1)
np.testing.assert_array_equal(buf, root_value)  # bcast stays full precision
try:
    ex.allreduce_sum(np.full(4, 70000.0, "float32"))
except FloatingPointError as err:
    assert "float16's range" in str(err)
else:
    raise AssertionError("fp16 overflow not refused")

# cudampi: detection, then the host-staged path (numpy buffers stand in for device buffers here)
aware = cuda_aware_mpi()
logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
cex = CudaMPIExchanger(comm)
assert cex.staging.cuda_aware == aware and cex.memory == "device"
buf = np.full(1001, comm.rank + 1, "float32")
assert cex.allreduce_sum(buf) is buf
np.testing.assert_array_equal(buf, np.full(1001, n * (n + 1) / 2, "float32"))
buf = np.full(3, comm.rank, "float64")
cex.bcast(buf, root=1)
np.testing.assert_array_equal(buf, np.ones(3))
staging = MPIStaging(cuda_aware=False)
host = np.arange(4.0)
assert staging.sendable(host) is host and staging.landed(staging.receivable(host), host) is host
if comm.rank == 0:
    print(f"fp16 ok on {n} ranks; worst error/bound {worst:.3f}; worst error/(u16*sum|x|) {loose:.3f}")
    print("cuda-aware MPI:", aware)
