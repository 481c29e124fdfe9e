"""Every add issued before ``mv.barrier()`` is applied before any worker leaves it.

Each round every worker pushes un-acknowledged adds (whole table and rows) to an
array and a matrix table, calls ``mv.barrier()``, then checks the exact values
(numpy reference), on an async and then a sync server. A worker's add that
lands after another worker's get shows up as a wrong value.

argv[1]: rounds per server mode (default 60)
"""

import sys

import _abort_on_error  # noqa: F401
import numpy as np

import theanompi.multiverso as mv

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
ROW_IDS = [0, 1, 5, 10]


def contribution(worker: int, shape) -> np.ndarray:
    """What ``worker`` adds each round: distinct per worker, exact in float32."""
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 17 + 1) * (worker + 1)


def run(sync: bool) -> int:
    mv.init(sync=sync)
    n, me = mv.workers_num(), mv.worker_id()
    array = mv.ArrayTableHandler(1000)
    matrix = mv.MatrixTableHandler(11, 10)  # small payloads: the race shows most often
    mv.barrier()
    ref_array, ref_matrix = np.zeros(1000, np.float32), np.zeros((11, 10), np.float32)
    mismatches = 0
    for r in range(rounds):
        use_array, use_matrix = r % 3 != 0, r % 3 != 1  # rounds of matrix only, array only, both
        for w in range(n):  # the reference first: nothing may delay the barrier after the adds
            ref_array += contribution(w, (1000,)) * use_array
            ref_matrix += contribution(w, (11, 10)) * use_matrix
            ref_matrix[ROW_IDS] += contribution(w, (len(ROW_IDS), 10)) * 2 * use_matrix
        if use_array:
            array.add(contribution(me, (1000,)))
        if use_matrix:
            matrix.add(contribution(me, (11, 10)))
            matrix.add(contribution(me, (len(ROW_IDS), 10)) * 2, row_ids=ROW_IDS)
        mv.barrier()
        # the table just added to is read first thing after the barrier (a later get gives stragglers time)
        if use_matrix:
            got_matrix = matrix.get()
            got_rows, got_array = matrix.get(row_ids=ROW_IDS[::-1]), array.get()
        else:
            got_array = array.get()
            got_matrix, got_rows = matrix.get(), matrix.get(row_ids=ROW_IDS[::-1])
        for what, got, want in (("array", got_array, ref_array), ("matrix", got_matrix, ref_matrix),
                                ("matrix rows", got_rows, ref_matrix[ROW_IDS[::-1]])):
            if not np.array_equal(got, want):
                mismatches += 1
                print(f"worker {me}: round {r} {what} after barrier differs from the reference "
                      f"(max |diff| {np.max(np.abs(got - want))})", flush=True)
        mv.barrier()
    mv.shutdown()
    return mismatches


failed = sum(run(sync) for sync in (False, True))
if failed:
    sys.exit(f"worker: {failed} stale reads after barrier")
print(f"worker ok: {rounds} rounds x 2 modes, barrier consistent", flush=True)
