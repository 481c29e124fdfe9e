"""One rank of benchmarks/slow_links.py's allreduce part (under mpiexec, on tools/netsim hosts).

    python _slow_links_allreduce.py MODE SIZES_MB REPEATS

MODE ``raw``: mpi4py's ``Allreduce`` with Open MPI's defaults (nothing of theanompi is imported). MODE
``theanompi``: the settings every theanompi rank makes before MPI starts
(:mod:`theanompi.comm.mpi_settings`), then BSP's exchanger (``BSP_EXCH_STRATEGY=ar``, the ``cdd`` sum) and, in the
same process, mpi4py's ``Allreduce`` again. MODE ``fp16``: the theanompi settings, then the fp16 allreduce of
``BSP_COMPRESSION=fp16`` (:func:`theanompi.comm.exchange.fp16.allreduce_sum_16`) with its messages in pairwise
rounds (what it does) and all posted at once, then BSP's fp32 exchanger. Rank 0 prints one JSON line per
(what, size): the best of ``REPEATS`` timed sums (after one untimed; the ways take turns, one sum each a round),
every one of them (``all_seconds``, in the order timed) and the bytes each rank sent per sum (a ring allreduce's
count, :func:`theanompi.comm.traffic.allreduce_bytes`, for fp32; rank 0's
:func:`~theanompi.comm.exchange.fp16.payload_bytes_16` for fp16).
"""

from __future__ import annotations

import json
import sys
import time


def timed_sums(ways: dict, buf, comm, repeats: int) -> dict[str, list[float]]:
    """The seconds of ``repeats`` timed sums of ``buf`` by each of ``ways`` (what -> allreduce), after one untimed
    sum each. The ways take turns, one sum each a round, so that none is favoured by when it ran (a link's queue,
    the other host's load): they are measured side by side."""
    seconds: dict[str, list[float]] = {}
    for what, allreduce in ways.items():
        allreduce(buf)
        seconds[what] = []
    for _ in range(repeats):
        for what, allreduce in ways.items():
            comm.Barrier()
            start = time.perf_counter()
            allreduce(buf)
            comm.Barrier()
            seconds[what].append(time.perf_counter() - start)
    return seconds


def fp16_ways(comm) -> dict:
    """The fp16 allreduce with its messages in pairwise rounds (MPITransport's way) and all at once."""
    from theanompi.comm.exchange.fp16 import FP16, allreduce_sum_16
    from theanompi.comm.exchange.transport import MPITransport

    class AllAtOnce(MPITransport):
        pairwise_rounds = False

    return {what: (lambda buf, transport=transport: allreduce_sum_16(buf, transport, FP16))
            for what, transport in (("theanompi fp16, pairwise rounds", MPITransport(comm)),
                                    ("theanompi fp16, all messages at once", AllAtOnce(comm)))}


def fp16_bytes(count: int, n_ranks: int) -> int:
    """What rank 0 sends in one fp16 allreduce of ``count`` elements."""
    from theanompi.comm.exchange.fp16 import FP16, payload_bytes_16

    return payload_bytes_16(count, n_ranks, 0, FP16)


def main() -> None:
    mode, sizes, repeats = sys.argv[1], [float(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
    if mode != "raw":
        from theanompi.comm.mpi_settings import apply_mca_defaults

        apply_mca_defaults()
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    half = fp16_ways(comm) if mode == "fp16" else {}
    ways = dict(half)
    if mode != "fp16":
        ways[f"mpi4py ({mode} settings)"] = lambda buf: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    if mode != "raw":
        from theanompi.comm.exchange import make_exchanger

        ways["theanompi BSP exchanger"] = make_exchanger("ar", comm).allreduce_sum
    for size_mb in sizes:
        buf = np.ones(int(size_mb * (1 << 20)) // 4, dtype=np.float32)
        for what, seconds in timed_sums(ways, buf, comm, repeats).items():
            ring = 2 * (comm.size - 1) * buf.nbytes // comm.size
            per_rank = fp16_bytes(buf.size, comm.size) if what in half else ring
            if comm.rank == 0:
                print(json.dumps({"what": what, "size_mb": size_mb, "ranks": comm.size, "seconds": min(seconds),
                                  "all_seconds": [round(t, 4) for t in seconds], "bytes_per_rank": per_rank}),
                      flush=True)


if __name__ == "__main__":
    main()
