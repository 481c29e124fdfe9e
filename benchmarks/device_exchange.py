"""Device exchange bandwidth per strategy on CuPy buffers (nccl32, nccl16, cudampi), next to the GPU's copies.

    python benchmarks/device_exchange.py [--ranks N] [--repeats 20] [--json PATH]

Runs itself under mpiexec on ``--ranks`` ranks (default: one per GPU, at least 2), rank r
on GPU r mod #GPUs. Strategies that need one rank per GPU (nccl32, nccl16) are skipped when
ranks share a GPU: on a host with one GPU, NCCL across GPUs cannot run at all (``--ranks 1``
runs NCCL's one-rank path: no traffic, its call cost and in-place copy; ``--ranks 2`` the
host-staged ``cudampi`` of two ranks sharing the GPU). For each float32 buffer size: the
median time of an in-place allreduce of the fused buffer (stream synchronised), the
algorithm bandwidth (buffer bytes / time) and the bus bandwidth (x 2(N-1)/N, as nccl-tests
report it). Rank 0 also measures, for the same sizes, the copies an exchange is made of:
device to device (bytes read + written, as the copy-bandwidth figures of GPUs are quoted),
device to host and host to device (a NumPy buffer, what host staging uses). Without CuPy
or a GPU it prints "skipped: no GPU" and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZES_MB = (1, 16, 100)
STRATEGIES = ("nccl32", "nccl16", "cudampi")


def _median_seconds(fn, repeats: int) -> float:
    import cupy
    import numpy as np

    times = []
    for i in range(repeats + 2):
        cupy.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        fn()
        cupy.cuda.get_current_stream().synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def copy_bandwidth(repeats: int) -> list[dict]:
    """GB/s of the copies an exchange is made of, per buffer size (this rank's GPU)."""
    import cupy
    import numpy as np

    rows = []
    for mb in SIZES_MB:
        src = cupy.ones(mb * 2**20 // 4, dtype="float32")
        dst = cupy.empty_like(src)
        host = np.empty(src.shape, dtype=src.dtype)
        d2d = _median_seconds(lambda: dst.__setitem__(Ellipsis, src), repeats)  # noqa: B023 - called right here
        d2h = _median_seconds(lambda: src.get(out=host), repeats)  # noqa: B023
        h2d = _median_seconds(lambda: dst.set(host), repeats)  # noqa: B023
        rows.append({"size_mb": mb, "d2d_GBps": 2 * src.nbytes / d2d / 1e9, "d2h_GBps": src.nbytes / d2h / 1e9,
                     "h2d_GBps": src.nbytes / h2d / 1e9})
    return rows


def rank_main(args) -> None:
    import cupy
    import numpy as np
    from mpi4py import MPI

    from theanompi.comm.exchange import make_exchanger
    from theanompi.core.devices import count_local_gpus

    comm = MPI.COMM_WORLD
    n_gpus = count_local_gpus()
    cupy.cuda.Device(comm.rank % n_gpus).use()
    shared = comm.size > n_gpus
    results = {}
    for strategy in STRATEGIES:
        if shared and strategy.startswith("nccl"):
            results[strategy] = "skipped: ranks share a GPU (NCCL needs one rank per GPU)"
            continue
        ex = make_exchanger(strategy, comm)
        rows = []
        for mb in SIZES_MB:
            buf = cupy.ones(mb * 2**20 // 4, dtype="float32")
            times = []
            for i in range(args.repeats + 2):
                comm.Barrier()
                cupy.cuda.get_current_stream().synchronize()
                t0 = time.perf_counter()
                ex.allreduce_sum(buf)
                cupy.cuda.get_current_stream().synchronize()
                if i >= 2:
                    times.append(time.perf_counter() - t0)
                buf.fill(1.0)
            t = float(np.median(comm.allreduce(np.array(times), op=MPI.MAX)))
            algbw = buf.nbytes / t / 1e9
            rows.append({"size_mb": mb, "ms": t * 1e3, "algbw_GBps": algbw,
                         "busbw_GBps": algbw * 2 * (comm.size - 1) / comm.size})
        results[strategy] = rows
    copies = copy_bandwidth(args.repeats) if comm.rank == 0 else None
    if comm.rank == 0:
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        print(f"device exchange: {comm.size} ranks on {n_gpus} x {name} (median of {args.repeats})")
        print(f"{'strategy':<9} {'size':>7} {'ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11}")
        for strategy, rows in results.items():
            if isinstance(rows, str):
                print(f"{strategy:<9} {rows}")
                continue
            for r in rows:
                print(f"{strategy:<9} {r['size_mb']:>5} MB {r['ms']:>9.3f} {r['algbw_GBps']:>11.2f} "
                      f"{r['busbw_GBps']:>11.2f}")
        print(f"{'copies':<9} {'size':>7} {'d2d GB/s':>9} {'d2h GB/s':>9} {'h2d GB/s':>9}   (d2d: read + written)")
        for r in copies:
            print(f"{'':<9} {r['size_mb']:>5} MB {r['d2d_GBps']:>9.1f} {r['d2h_GBps']:>9.1f} {r['h2d_GBps']:>9.1f}")
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"ranks": comm.size, "gpus": n_gpus, "device": name, "results": results, "copies": copies},
                      f, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "device_exchange.json"))
    args = parser.parse_args()
    if "OMPI_COMM_WORLD_SIZE" not in os.environ:
        from theanompi.core.devices import count_local_gpus

        n_gpus = count_local_gpus()
        if n_gpus == 0:
            print("device exchange: skipped: no GPU (needs CuPy and a CUDA GPU: pip install 'theanompi[cuda]')")
            return
        from _mpi import relaunch_under_mpiexec

        relaunch_under_mpiexec(args.ranks or max(2, n_gpus))
    rank_main(args)


if __name__ == "__main__":
    main()
