"""The 16-bit allreduce's two possible shapes, side by side with MPI's fp32 Allreduce, on loopback.

    flock /work/wt/bench.lock python benchmarks/half_allreduce.py [--ranks 2] [--quick] [--json PATH]

Rows, per buffer size (float32 elements), each a median over repetitions in a rotated order:
* fp32:       ``comm.Allreduce(MPI.IN_PLACE, buf)`` (what BSP_COMPRESSION=none does)
* rs/ag:      :func:`theanompi.comm.exchange.fp16.allreduce_sum_16` with the fp16 codec: reduce-scatter and allgather
              over point-to-point messages, 2(N-1)/N x the buffer in fp16 per rank (what BSP_COMPRESSION=fp16 does)
* allgather:  every rank's whole buffer cast to fp16, ``Allgather``-ed, summed in float32 in rank order: (N-1) x the
              buffer in fp16 per rank, one round of messages instead of two (the alternative for small worlds)
Bytes per rank are what each rank sends. The JSON records the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _mpi import relaunch_under_mpiexec

SIZES = [10_000, 100_000, 1_000_000, 4_000_000]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and sizes (under a minute)")
    parser.add_argument("--json", default=None, help="default benchmarks/results/half_allreduce_<ranks>.json")
    args = parser.parse_args()
    relaunch_under_mpiexec(args.ranks)

    import numpy as np
    from mpi4py import MPI

    from theanompi.comm.exchange.fp16 import FP16, allreduce_sum_16, payload_bytes_16
    from theanompi.comm.exchange.transport import MPITransport

    comm = MPI.COMM_WORLD
    n, me = comm.size, comm.rank
    transport = MPITransport(comm)
    sizes, reps = (SIZES[:3], 5) if args.quick else (SIZES, args.reps)

    def fp32(buf):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def rs_ag(buf):
        allreduce_sum_16(buf, transport, FP16)

    def allgather(buf):
        mine = np.empty(buf.size + 1, np.float16)
        FP16.encode(buf, mine, np)
        every = np.empty((n, buf.size + 1), np.float16)
        comm.Allgather(mine, every)
        buf[...] = 0
        for r in range(n):
            buf += FP16.decode(every[r], np)

    methods = {"fp32": fp32, "rs/ag": rs_ag, "allgather": allgather}
    sent = {"fp32": lambda s: 2 * (n - 1) * s * 4 // n, "rs/ag": lambda s: payload_bytes_16(s, n, me, FP16),
            "allgather": lambda s: (n - 1) * (s + 1) * 2}
    rows = []
    for size in sizes:
        data = np.random.default_rng(me).standard_normal(size).astype(np.float32)
        times: dict[str, list[float]] = {name: [] for name in methods}
        for rep in range(reps):
            order = list(methods)[rep % 3:] + list(methods)[:rep % 3]
            for name in order:
                buf = data.copy()
                comm.Barrier()
                start = time.perf_counter()
                methods[name](buf)
                elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
                times[name].append(elapsed)
        row = {"elements": size, **{f"{name}_ms": 1e3 * float(np.median(t)) for name, t in times.items()},
               **{f"{name}_bytes": sent[name](size) for name in methods}}
        rows.append(row)
        if me == 0:
            print(f"{size:>9} elements: " + "  ".join(f"{name} {row[f'{name}_ms']:.2f} ms ({row[f'{name}_bytes']} B)"
                                                      for name in methods), flush=True)
    if me == 0:
        from asgd_staleness import machine

        path = args.json or os.path.join(os.path.dirname(__file__), "results", f"half_allreduce_{n}.json")
        with open(path, "w") as f:
            json.dump({"ranks": n, "reps": reps, "machine": {**machine(), "load": os.getloadavg()},
                       "note": "loopback, one machine; bytes: what each rank sends", "rows": rows}, f, indent=2)
        print(f"json: {path}")


if __name__ == "__main__":
    main()
