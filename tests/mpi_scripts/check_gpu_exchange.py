"""Under mpiexec on a GPU machine (CuPy): the device exchangers on CuPy buffers.

Modes (argv[1]):
* ``one-rank``   (1 rank): nccl32 allreduce/bcast and nccl16 through a 1-rank NCCL communicator.
* ``shared-gpu`` (2 ranks, one GPU): NCCL refuses with one line; cudampi (CUDA-aware or host-staged)
  sums; the fp16 allreduce over MPI on CuPy buffers stays within its error bound.
* ``two-gpus``   (2 ranks, one GPU each): nccl32 and nccl16 against float64 numpy sums.
"""

import sys

import _abort_on_error  # noqa: F401
import cupy
import numpy as np
from mpi4py import MPI

from theanompi.comm.exchange import make_exchanger
from theanompi.comm.exchange.cudampi import cuda_aware_mpi
from theanompi.comm.exchange.fp16 import HalfExchanger, error_bound
from theanompi.comm.exchange.transport import MPITransport
from theanompi.core.errors import ConfigError

comm = MPI.COMM_WORLD
mode = sys.argv[1]
if mode == "two-gpus":
    cupy.cuda.Device(comm.rank).use()


def inputs(size, scale=1.0):
    per_rank = [(np.random.default_rng([r, size]).standard_normal(size) * scale).astype("float32")
                for r in range(comm.size)]
    stacked = np.stack(per_rank).astype("float64")
    return per_rank[comm.rank], stacked.sum(axis=0), np.abs(stacked).sum(axis=0)


def check_exact(ex, what):
    for size in (1, 1001, 1 << 20):
        mine, exact, _ = inputs(size)
        buf = cupy.asarray(mine)
        out = ex.allreduce_sum(buf)
        assert isinstance(out, cupy.ndarray), what
        np.testing.assert_allclose(cupy.asnumpy(out), exact, rtol=1e-6, atol=1e-5, err_msg=what)
    buf = cupy.full(5, comm.rank, "float32")
    ex.bcast(buf, root=comm.size - 1)
    np.testing.assert_array_equal(cupy.asnumpy(buf), np.full(5, comm.size - 1))


def check_fp16(ex, what):
    worst = 0.0
    for size in (3, 1001, 1 << 20):
        mine, exact, abs_sum = inputs(size, scale=10.0)
        buf = cupy.asarray(mine)
        out = cupy.asnumpy(ex.allreduce_sum(buf)).astype("float64")
        bound = error_bound(abs_sum, comm.size)
        assert np.all(np.abs(out - exact) <= bound), f"{what}: error above the bound"
        worst = max(worst, float((np.abs(out - exact) / bound).max()))
    return worst


if mode == "one-rank":
    check_exact(make_exchanger("nccl32", comm), "nccl32 1 rank")
    check_fp16(make_exchanger("nccl16", comm), "nccl16 1 rank")
    print("gpu one-rank ok")
elif mode == "shared-gpu":
    try:
        make_exchanger("nccl32", comm)
    except ConfigError as err:
        assert "share GPU" in str(err) and "one rank per GPU" in str(err), err
    else:
        raise AssertionError("NCCL accepted two ranks on one GPU")
    check_exact(make_exchanger("cudampi", comm), "cudampi")
    worst = check_fp16(HalfExchanger(MPITransport(comm, xp=cupy)), "fp16 over MPI on CuPy buffers")
    if comm.rank == 0:
        print(f"gpu shared-gpu ok; cuda-aware MPI: {cuda_aware_mpi()}; fp16 worst error/bound {worst:.3f}")
elif mode == "two-gpus":
    check_exact(make_exchanger("nccl32", comm), "nccl32")
    worst = check_fp16(make_exchanger("nccl16", comm), "nccl16")
    if comm.rank == 0:
        print(f"gpu two-gpus ok; nccl16 worst error/bound {worst:.3f}")
else:
    raise SystemExit(f"unknown mode {mode!r}")
