"""fp16 on the wire, fp32 accumulation: an allreduce that moves half the bytes.

Strategies ``nccl16`` (over NCCL) and ``ar16`` (over host MPI). The buffer is cut
into one chunk per rank; rank r owns chunk r.

1. reduce-scatter: every rank casts its buffer to fp16 and sends chunk p to rank p;
   the owner adds the N-1 received fp16 chunks to its own *unrounded* values in
   fp32 (fixed order: ascending rank);
2. allgather: the owner casts its summed chunk to fp16 and sends it to every rank;
   every rank (the owner included) takes the fp16-rounded sum.

Each rank sends and receives 2(N-1)/N of the buffer, as in a ring allreduce, but
in fp16: half of ``nccl32``'s bytes. Every rank ends with identical values. Unlike
Theano-MPI's fp16 allreduce (which summed in fp16), rounding happens only twice per
element, so the error of the sum S = sum_i x_i over N ranks is bounded by
:func:`error_bound`:

    |result - S| <= (2 u16 + N u32)(1 + u16) sum_i |x_i| + (N + 1) 2^-25

with u16 = 2^-11 and u32 = 2^-24 (the last term covers fp16 subnormals). Values
beyond fp16's range (|x| > 65504) raise FloatingPointError instead of becoming inf.

Example (under ``mpiexec -n 2``)
-------
>>> from mpi4py import MPI                                           # doctest: +SKIP
>>> from theanompi.comm.exchange.transport import MPITransport            # doctest: +SKIP
>>> ex = Fp16Exchanger(MPITransport(MPI.COMM_WORLD))                 # doctest: +SKIP
>>> ex.allreduce_sum(np.full(4, 0.1, "float32"))                     # doctest: +SKIP
array([0.2, 0.2, 0.2, 0.2], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from theanompi.comm.exchange.base import Exchanger

U16 = 2.0 ** -11  # unit roundoff of float16
U32 = 2.0 ** -24  # unit roundoff of float32
FP16_MAX = 65504.0


def chunk_bounds(n: int, parts: int) -> list[int]:
    """Offsets cutting ``n`` elements into ``parts`` contiguous chunks (sizes differ by at most 1).

    >>> chunk_bounds(10, 3)
    [0, 4, 7, 10]
    """
    base, extra = divmod(n, parts)
    bounds = [0]
    for p in range(parts):
        bounds.append(bounds[-1] + base + (1 if p < extra else 0))
    return bounds


def error_bound(abs_sum, n_ranks: int):
    """Element-wise bound on |fp16-allreduce result - exact sum| given sum_i |x_i| (see the module doc)."""
    return (2 * U16 + n_ranks * U32) * (1 + U16) * abs_sum + (n_ranks + 1) * 2.0 ** -25


def _check_fp16_range(half, xp, what: str) -> None:
    if not bool(xp.isfinite(xp.sum(half, dtype=xp.float32))):
        raise FloatingPointError(f"fp16 exchange: {what} holds values beyond float16's range (|x| > {FP16_MAX:g}) "
                                 "or NaN/Inf; use a full-precision strategy (ar, nccl32, cudampi)")


def allreduce_sum_fp16(buf, transport):
    """Replace the float buffer ``buf`` by the sum over ``transport``'s ranks (fp16 traffic); return it."""
    xp, size, me = transport.xp, transport.size, transport.rank
    if size == 1:
        return buf
    if np.dtype(buf.dtype).kind != "f":
        raise ValueError(f"fp16 exchange compresses float buffers, got {buf.dtype}")
    bounds = chunk_bounds(buf.size, size)
    lo, hi = bounds[me], bounds[me + 1]
    others = [p for p in range(size) if p != me]
    owners = [p for p in others if bounds[p + 1] > bounds[p]]  # peers with a non-empty chunk
    mine = others if hi > lo else []  # peers that send me / receive from me my chunk

    def chunk(arr, p):
        return arr[bounds[p]:bounds[p + 1]]

    with np.errstate(over="ignore"):
        half = buf.astype(np.float16)
    _check_fp16_range(half, xp, "the local buffer")
    incoming = xp.empty((size, hi - lo), dtype=np.float16)
    transport.exchange(sends=[(p, chunk(half, p)) for p in owners], recvs=[(p, incoming[p]) for p in mine])
    acc = buf[lo:hi].astype(np.promote_types(buf.dtype, np.float32))  # own contribution, unrounded
    for p in mine:  # ascending rank: a fixed summation order
        acc += incoming[p]
    with np.errstate(over="ignore"):
        half[lo:hi] = acc
    _check_fp16_range(half[lo:hi], xp, "the sum")
    transport.exchange(sends=[(p, half[lo:hi]) for p in mine], recvs=[(p, chunk(half, p)) for p in owners])
    buf[...] = half
    return buf


class Fp16Exchanger(Exchanger):
    """Allreduce with fp16 traffic and fp32 accumulation over any :class:`~theanompi.comm.exchange.transport.Transport`.

    ``bcast`` stays full precision (it sets parameters, once).
    """

    def __init__(self, transport):
        super().__init__()
        self.transport = transport
        self.sent = transport.sent  # the transport counts the chunks it sends
        self.size = transport.size
        self.memory = "host" if transport.xp is np else "device"

    def allreduce_sum(self, buf):
        return allreduce_sum_fp16(buf, self.transport)

    def bcast(self, buf, root: int = 0):
        if self.size > 1:
            self.transport.bcast(buf, root)
        return buf
