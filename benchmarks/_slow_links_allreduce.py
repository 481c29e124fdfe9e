"""One rank of benchmarks/slow_links.py's allreduce part (under mpiexec, on tools/netsim hosts).

    python _slow_links_allreduce.py MODE SIZES_MB REPEATS

MODE ``raw``: mpi4py's ``Allreduce`` with Open MPI's defaults (nothing of theanompi is imported). MODE
``theanompi``: the settings every theanompi rank makes before MPI starts
(:mod:`theanompi.comm.mpi_settings`), then BSP's exchanger (``BSP_EXCH_STRATEGY=ar``, the ``cdd`` sum) and, in the
same process, mpi4py's ``Allreduce`` again. Rank 0 prints one JSON line per (what, size): the best of ``REPEATS``
timed sums (after one untimed) and the bytes each rank sent per sum (:func:`theanompi.comm.traffic.allreduce_bytes`
for the exchanger; the same count for mpi4py).
"""

from __future__ import annotations

import json
import sys
import time


def best_seconds(allreduce, buf, comm, repeats: int) -> float:
    allreduce(buf)
    best = float("inf")
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        allreduce(buf)
        comm.Barrier()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    mode, sizes, repeats = sys.argv[1], [float(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
    if mode == "theanompi":
        from theanompi.comm.mpi_settings import apply_mca_defaults

        apply_mca_defaults()
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    ways = {f"mpi4py ({mode} settings)": lambda buf: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)}
    if mode == "theanompi":
        from theanompi.comm.exchange import make_exchanger

        exchanger = make_exchanger("ar", comm)
        ways["theanompi BSP exchanger"] = exchanger.allreduce_sum
    for size_mb in sizes:
        buf = np.ones(int(size_mb * (1 << 20)) // 4, dtype=np.float32)
        per_rank = 2 * (comm.size - 1) * buf.nbytes // comm.size
        for what, allreduce in ways.items():
            seconds = best_seconds(allreduce, buf, comm, repeats)
            if comm.rank == 0:
                print(json.dumps({"what": what, "size_mb": size_mb, "ranks": comm.size, "seconds": seconds,
                                  "bytes_per_rank": per_rank}), flush=True)


if __name__ == "__main__":
    main()
