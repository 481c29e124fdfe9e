"""Under mpiexec, on host buffers: the 16-bit allreduces (ar16 = fp16, and bf16) against float64 numpy sums and
their error bounds, values beyond fp16's range summed through the scale, NaN/Inf refused; cudampi's detection and
its host-staged path. Prints the worst error relative to the bound."""

import itertools
import logging
import sys

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

from theanompi.comm.exchange import make_exchanger
from theanompi.comm.exchange.cudampi import CudaMPIExchanger, MPIStaging, cuda_aware_mpi
from theanompi.comm.exchange.fp16 import BF16, FP16, error_bound

comm = MPI.COMM_WORLD
n = comm.size
worst = {"fp16": 0.0, "bf16": 0.0}  # max |error| / bound
loose = {"fp16": 0.0, "bf16": 0.0}  # max |error| / (u * sum |x|): shows 16 bits really were on the wire
for codec, ex in ((FP16, make_exchanger("ar16", comm)), (BF16, make_exchanger("ar", comm, half="bf16"))):
    # 1e5: beyond fp16's 65504, summed through the message's scale
    for size, scale in itertools.product((1, n - 1, 7, 1000, 100_003), (1e-3, 1.0, 300.0, 1e5)):
        per_rank = [(np.random.default_rng([r, size, int(scale * 1000)]).standard_normal(size) * scale)
                    .astype("float32")
                    for r in range(n)]
        stacked = np.stack(per_rank).astype("float64")
        exact, abs_sum = stacked.sum(axis=0), np.abs(stacked).sum(axis=0)
        buf = per_rank[comm.rank].copy()
        out = ex.allreduce_sum(buf)
        assert out is buf and buf.dtype == np.float32, "the 16-bit allreduce must work in place on the float32 buffer"
        err = np.abs(buf.astype("float64") - exact)
        bound = error_bound(abs_sum, n, codec)
        assert np.all(err <= bound), f"{codec.name} size {size} scale {scale}: error {err.max()} above bound"
        if size:
            worst[codec.name] = max(worst[codec.name], float((err / bound).max()))
            loose[codec.name] = max(loose[codec.name], float((err / (codec.unit_roundoff * abs_sum + 1e-30)).max()))
        every = comm.allgather(buf.tobytes())
        assert all(e == every[0] for e in every), f"ranks disagree on the {codec.name} sum"
    root_value = np.arange(5, dtype="float32") / 3
    buf = root_value.copy() if comm.rank == n - 1 else np.zeros(5, "float32")
    ex.bcast(buf, root=n - 1)
    np.testing.assert_array_equal(buf, root_value)  # bcast stays full precision
    bad = np.full(4 * n, np.inf if codec is FP16 else np.nan, "float32")
    try:  # every rank's chunks hold the bad value: every rank refuses before sending anything
        ex.allreduce_sum(bad)
    except FloatingPointError as err:
        assert f"{codec.name} exchange" in str(err) and "NaN/Inf" in str(err), err
    else:
        raise AssertionError(f"{codec.name}: a non-finite buffer was not refused")

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
    for name in worst:
        print(f"{name} ok on {n} ranks; worst error/bound {worst[name]:.3f}; worst error/(u*sum|x|) {loose[name]:.3f}")
    print("cuda-aware MPI:", aware)
