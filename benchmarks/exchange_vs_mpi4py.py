"""Our fused exchange vs raw mpi4py Allreduce vs torch.distributed (gloo) on the same bytes, one run.

    python benchmarks/exchange_vs_mpi4py.py [--ranks 2] [--reps 15] [--json PATH]

Rows, per buffer size (float32):
* raw:   ``comm.Allreduce(MPI.IN_PLACE, buf)``
* cdd:   ``MPIExchanger.allreduce_sum(buf)``  (what BSP-cdd does every step)
* avg:   ``FusedParams.read`` + allreduce + ``FusedParams.write(scale=1/N)`` over 8 param
         tensors of the same total size (what BSP-avg does every k steps)
* gloo:  ``torch.distributed.all_reduce`` (gloo backend over loopback TCP), when torch is installed
Every repetition runs each method once, in a rotated order; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _mpi import relaunch_under_mpiexec

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 100 << 20]


def init_gloo(comm):
    """torch.distributed with gloo over loopback (rank 0 picks a free port), or None without torch."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    import socket

    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank, world_size=comm.size)
    return dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "exchange.json"))
    args = parser.parse_args()
    relaunch_under_mpiexec(args.ranks)

    from theanompi.backend.pytensor_config import configure_pytensor

    configure_pytensor()
    import numpy as np
    import pytensor
    from mpi4py import MPI

    from theanompi.comm.exchange.mpi import MPIExchanger
    from theanompi.comm.fused_params import FusedParams

    comm = MPI.COMM_WORLD
    ex = MPIExchanger(comm)
    dist = init_gloo(comm)
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        buf = np.ones(n, dtype=np.float32)
        pieces = np.array_split(np.arange(n), 8)
        params = [pytensor.shared(np.ones(len(p), np.float32)) for p in pieces]
        fused = FusedParams(params)

        def raw(buf=buf):
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        def cdd(buf=buf):
            ex.allreduce_sum(buf)

        def avg(fused=fused):
            fused.write(ex.allreduce_sum(fused.read()), scale=1.0 / comm.size)

        methods = {"raw": raw, "cdd": cdd, "avg": avg}
        if dist is not None:
            import torch

            tensor = torch.from_numpy(buf)  # shares memory with buf

            def gloo(tensor=tensor):
                dist.all_reduce(tensor)

            methods["gloo"] = gloo
        times = {k: [] for k in methods}
        names = list(methods)
        for rep in range(args.reps + 2):
            order = names[rep % len(names):] + names[:rep % len(names)]  # rotate: no position bias
            for name in order:
                fn = methods[name]
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                if rep >= 2:  # warm-up
                    times[name].append(elapsed)
        med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        rows.append({"bytes": nbytes, "raw_ms": med["raw"], "cdd_ms": med["cdd"], "avg_ms": med["avg"],
                     "cdd_ratio": med["cdd"] / med["raw"], "avg_ratio": med["avg"] / med["raw"],
                     "gloo_ms": med.get("gloo"), "cdd_vs_gloo": med["cdd"] / med["gloo"] if "gloo" in med else None})
    if comm.rank == 0:
        print(f"allreduce on {comm.size} ranks, float32, median of {args.reps}")
        print(f"{'size':>9} {'raw mpi4py':>11} {'ours cdd':>9} {'ratio':>6} {'ours avg':>9} {'ratio':>6}"
              f" {'gloo':>9} {'cdd/gloo':>8}")
        for r in rows:
            size = f"{r['bytes'] >> 20} MB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KB"
            gloo = (f"{r['gloo_ms']:>7.3f}ms {r['cdd_vs_gloo']:>8.3f}" if r["gloo_ms"] is not None
                    else f"{'n/a':>9} {'':>8}")
            print(f"{size:>9} {r['raw_ms']:>9.3f}ms {r['cdd_ms']:>7.3f}ms {r['cdd_ratio']:>6.3f} "
                  f"{r['avg_ms']:>7.3f}ms {r['avg_ratio']:>6.3f} {gloo}")
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"ranks": comm.size, "reps": args.reps, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
