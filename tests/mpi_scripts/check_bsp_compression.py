"""Under mpiexec: BSP_COMPRESSION's compressors against NumPy references of their formulas.

* fp16 / bf16 (``make_compressor`` over ``make_exchanger("ar", half=...)``): the result equals, bit for bit, a NumPy
  replay of the reduce-scatter/allgather -- chunk p summed by rank p in float32, its own values unrounded, the
  others' rounded (fp16: scaled by 2^k with k = 14 - floor(log2 max|chunk|), then ``np.float16``; bf16:
  ``ml_dtypes.bfloat16``, an implementation independent of ours), then the sum rounded the same way.
* powersgd (rank 2, start_iter 1): iteration 0 is the exact sum; iterations 1-3 equal a float64 replay of Vogels et
  al.'s Algorithm 2 (P = sum M_i Q, P^ = QR(P), Q_i = M_i^T P^, e_i = M_i - P^ Q_i^T, out = P^ (sum Q_i)^T, warm
  start Q / N) on every rank's inputs; vectors and matrices too small to gain are summed exactly; the bytes match.
  After ``reset`` the compressor equals a fresh one; its state survives ``state``/``load_state``.
Prints one line per check on rank 0.
"""

import _abort_on_error  # noqa: F401
import ml_dtypes
import numpy as np
from mpi4py import MPI

from theanompi.comm.compression import make_compressor
from theanompi.comm.exchange import make_exchanger
from theanompi.comm.exchange.fp16 import chunk_bounds
from theanompi.core.session_options import BSPOptions

comm = MPI.COMM_WORLD
n, me = comm.size, comm.rank


def inputs(size, step, scale=1.0, decades=0):
    """Every rank's float32 buffer (all ranks compute all of them: the reference needs them); ``decades``: the
    magnitudes spread log-uniformly over that many powers of ten below ``scale`` (fp16's subnormals come in)."""
    out = []
    for r in range(n):
        rng = np.random.default_rng([r, size, step])
        values = rng.standard_normal(size) * scale
        if decades:
            values *= 10.0 ** -rng.uniform(0, decades, size)
        out.append(values.astype("float32"))
    return out


def round_fp16(x):
    x = x.astype(np.float32)
    peak = float(np.abs(x).max()) if x.size else 0.0
    k = 0 if peak == 0 else int(14 - np.floor(np.log2(peak)))
    return (x * np.float32(2.0 ** k)).astype(np.float16).astype(np.float32) * np.float32(2.0 ** -k)


def round_bf16(x):
    return x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def reference_16(per_rank, rounding):
    size = per_rank[0].size
    bounds = chunk_bounds(size, n)
    out = np.empty(size, np.float32)
    for p in range(n):
        lo, hi = bounds[p], bounds[p + 1]
        if hi == lo:
            continue
        acc = per_rank[p][lo:hi].copy()
        for j in range(n):
            if j != p:
                acc += rounding(per_rank[j][lo:hi])
        out[lo:hi] = rounding(acc)
    return out


for codec, rounding in (("fp16", round_fp16), ("bf16", round_bf16)):
    options = BSPOptions(compression=codec)
    compressor = make_compressor(options, make_exchanger("ar", comm, half=codec), [(3,)], np.float32)
    sent = 0
    for size, scale, decades in ((1, 1.0, 0), (n + 1, 1e-3, 0), (1000, 1.0, 12), (4099, 1e5, 0), (10_001, 3e-7, 9)):
        per_rank = inputs(size, 0, scale, decades)
        per_rank[0][: min(size, 3)] *= 7.0  # chunks of different magnitudes: scales differ per message
        buf = per_rank[me].copy()
        out = compressor.allreduce_sum(buf, iteration=0)
        assert out is buf
        np.testing.assert_array_equal(buf, reference_16(per_rank, rounding), err_msg=f"{codec} size {size}")
        bounds = chunk_bounds(size, n)
        own = bounds[me + 1] - bounds[me]
        per_message = 1 if codec == "fp16" else 0  # the scale's exponent
        scattered = sum(bounds[p + 1] - bounds[p] + per_message for p in range(n)
                        if p != me and bounds[p + 1] > bounds[p])
        sent += 2 * (scattered + ((n - 1) * (own + per_message) if own else 0))
    assert compressor.exchanger.sent.total == sent, (compressor.exchanger.sent.total, sent)
    if me == 0:
        print(f"{codec} ok on {n} ranks: equal to the NumPy replay bit for bit; {sent} bytes sent by rank 0")


# ----- PowerSGD ------------------------------------------------------------------------------
SHAPES = [(40, 24), (24,), (6, 3, 2, 2), (2, 3), (24, 10), (10,)]  # (2, 3) at rank 2: sent whole
RANK, START = 2, 1
sizes = [int(np.prod(s)) for s in SHAPES]
offsets = np.concatenate([[0], np.cumsum(sizes)])
total = int(offsets[-1])
options = BSPOptions(compression="powersgd", powersgd_rank=RANK, powersgd_start_iter=START, seed=5)
compressor = make_compressor(options, make_exchanger("ar", comm), SHAPES, np.float32)


def matrices_of(flat):
    """(index, matrix view) of the parameters PowerSGD compresses: ndim >= 2 and (rows + cols) r < rows cols."""
    out = []
    for i, shape in enumerate(SHAPES):
        if len(shape) >= 2:
            rows, cols = shape[0], sizes[i] // shape[0]
            r = min(RANK, rows, cols)
            if (rows + cols) * r < rows * cols:
                out.append((i, flat[offsets[i]:offsets[i + 1]].reshape(rows, cols)))
    return out


compressed = [i for i, _ in matrices_of(np.zeros(total))]
assert compressed == [0, 2, 4], compressed
rng = np.random.default_rng(5)  # the reference's Q start: the session seed, drawn in parameter order
ref_q = {i: rng.standard_normal((m.shape[1], min(RANK, *m.shape))).astype(np.float32).astype(np.float64)
         for i, m in matrices_of(np.zeros(total))}
ref_err = [{i: np.zeros(m.shape) for i, m in matrices_of(np.zeros(total))} for _ in range(n)]
expected_bytes = 0


def ring(count):  # bytes of a float32 allreduce of `count` elements, as theanompi.comm.traffic counts them
    return (2 * (n - 1) * count * 4) // n


for step in range(4):
    per_rank = inputs(total, 100 + step)
    buf = per_rank[me].copy()
    out = compressor.allreduce_sum(buf, iteration=step)
    assert out is buf
    exact = np.sum(np.stack(per_rank).astype(np.float64), axis=0)
    if step < START:
        np.testing.assert_allclose(buf, exact, rtol=1e-6, atol=1e-6)
        expected_bytes += ring(total)
        continue
    expected = exact.copy()  # vectors and small matrices: the exact sum
    for i, _ in matrices_of(expected):
        ms = [per_rank[w][offsets[i]:offsets[i + 1]].reshape(ref_err[w][i].shape).astype(np.float64) + ref_err[w][i]
              for w in range(n)]
        p_hat, _ = np.linalg.qr(sum(m @ ref_q[i] for m in ms))
        local_q = [m.T @ p_hat for m in ms]
        for w in range(n):
            ref_err[w][i] = ms[w] - p_hat @ local_q[w].T
        expected[offsets[i]:offsets[i + 1]] = (p_hat @ sum(local_q).T).ravel()
        ref_q[i] = sum(local_q) / n
    np.testing.assert_allclose(buf, expected, rtol=2e-4, atol=2e-4, err_msg=f"powersgd step {step}")
    mine = compressor.state()
    errors = np.concatenate([ref_err[me][i].ravel() for i in compressed])
    np.testing.assert_allclose(mine["powersgd_error"], errors, rtol=2e-4, atol=2e-4)
    p_count = sum(SHAPES[i][0] * 2 for i in compressed)
    q_count = sum(sizes[i] // SHAPES[i][0] * 2 for i in compressed)
    expected_bytes += ring(p_count + total - sum(sizes[i] for i in compressed)) + ring(q_count)
    assert not np.allclose(buf, exact, atol=1e-2), "rank 2 must lose something: else the check tests nothing"
assert compressor.exchanger.sent.total == expected_bytes, (compressor.exchanger.sent.total, expected_bytes)
ratio = ring(total) / (expected_bytes - ring(total)) * 3

saved = compressor.state()
again = make_compressor(options, make_exchanger("ar", comm), SHAPES, np.float32)
again.load_state(saved)
probe = inputs(total, 999)[me]
a, b = compressor.allreduce_sum(probe.copy(), 9), again.allreduce_sum(probe.copy(), 9)
np.testing.assert_array_equal(a, b)  # the state is all there is: a loaded one continues identically
compressor.reset()
fresh = make_compressor(options, make_exchanger("ar", comm), SHAPES, np.float32)
np.testing.assert_array_equal(compressor.allreduce_sum(probe.copy(), 9), fresh.allreduce_sum(probe.copy(), 9))
if me == 0:
    print(f"powersgd ok on {n} ranks: 3 compressed steps equal the NumPy replay of Algorithm 2, errors included; "
          f"{ratio:.1f}x fewer bytes than uncompressed; state reloads and resets")
