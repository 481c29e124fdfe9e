"""Our fused exchange vs raw mpi4py Allreduce on the same bytes, side by side in one run.

    python benchmarks/exchange_vs_mpi4py.py [--ranks 2] [--reps 15] [--json PATH]

Rows, per buffer size (float32):
* raw:   ``comm.Allreduce(MPI.IN_PLACE, buf)``
* cdd:   ``MPIExchanger.allreduce_sum(buf)``  (what BSP-cdd does every step)
* avg:   ``FusedParams.read`` + allreduce + ``FusedParams.write(scale=1/N)`` over 8 param
         tensors of the same total size (what BSP-avg does every k steps)
Measurements alternate between methods each repetition; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _mpi import relaunch_under_mpiexec  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 100 << 20]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "exchange.json"))
    args = parser.parse_args()
    relaunch_under_mpiexec(args.ranks)

    from theanompi.backend import configure_pytensor

    configure_pytensor()
    import numpy as np
    import pytensor
    from mpi4py import MPI

    from theanompi.exchange.mpi import MPIExchanger
    from theanompi.params import FusedParams

    comm = MPI.COMM_WORLD
    ex = MPIExchanger(comm)
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        buf = np.ones(n, dtype=np.float32)
        pieces = np.array_split(np.arange(n), 8)
        params = [pytensor.shared(np.ones(len(p), np.float32)) for p in pieces]
        fused = FusedParams(params)

        def raw():
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        def cdd():
            ex.allreduce_sum(buf)

        def avg():
            fused.write(ex.allreduce_sum(fused.read()), scale=1.0 / comm.size)

        methods = {"raw": raw, "cdd": cdd, "avg": avg}
        times = {k: [] for k in methods}
        for rep in range(args.reps + 2):
            for name, fn in methods.items():
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                if rep >= 2:  # warm-up
                    times[name].append(elapsed)
        med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        rows.append({"bytes": nbytes, "raw_ms": med["raw"], "cdd_ms": med["cdd"], "avg_ms": med["avg"],
                     "cdd_ratio": med["cdd"] / med["raw"], "avg_ratio": med["avg"] / med["raw"]})
    if comm.rank == 0:
        print(f"allreduce on {comm.size} ranks, float32, median of {args.reps}")
        print(f"{'size':>9} {'raw mpi4py':>11} {'ours cdd':>9} {'ratio':>6} {'ours avg':>9} {'ratio':>6}")
        for r in rows:
            size = f"{r['bytes'] >> 20} MB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KB"
            print(f"{size:>9} {r['raw_ms']:>9.3f}ms {r['cdd_ms']:>7.3f}ms {r['cdd_ratio']:>6.3f} "
                  f"{r['avg_ms']:>7.3f}ms {r['avg_ratio']:>6.3f}")
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"ranks": comm.size, "reps": args.reps, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
