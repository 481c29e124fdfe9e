"""16-bit floats on the wire, fp32 accumulation: an allreduce that moves half the bytes.

Two codecs, one algorithm (:func:`allreduce_sum_16`):

* :data:`FP16` -- IEEE half precision. Every message carries its own power-of-two scale 2^k, chosen from the
  largest magnitude M it holds so that M 2^k lies in [2^14, 2^15): nothing overflows (fp16 ends at 65504), and
  values underflow only below 2^-38 M. The exponent k travels as one more fp16 element at the end of the
  message (an integer, exact). Multiplying by 2^k is exact, so the scale changes no rounding but fp16's.
* :data:`BF16` -- bfloat16: float32's exponent range with 8 bits of precision, rounded to nearest even; it needs
  no scale. NumPy has no bfloat16, so the codec keeps the upper 16 bits of each float32 (``uint16`` on the wire).

Strategies ``ar16`` and ``nccl16`` and ``BSP_COMPRESSION=fp16``/``bf16`` (:mod:`theanompi.comm.compression`) all
run this one algorithm. The buffer is cut into one chunk per rank; rank r owns chunk r.

1. reduce-scatter: every rank encodes chunk p of its buffer and sends it to rank p; the owner adds the N-1
   received chunks, decoded, to its own *unrounded* values in fp32 (fixed order: ascending rank);
2. allgather: the owner encodes its summed chunk and sends it to every rank; every rank (the owner included)
   takes the decoded sum.

Each phase's messages go through :meth:`~theanompi.comm.exchange.transport.Transport.exchange_with_all`: over MPI
in pairwise rounds (no link receives from several senders at once), over NCCL as one group.

Each rank sends 2(N-1)/N of the buffer in 16 bits (plus one element per fp16 message): half a ring allreduce's fp32
bytes (:func:`payload_bytes_16`; the transport counts them in ``sent``). Every rank ends with identical values.
Unlike Theano-MPI's fp16 allreduce (which summed in fp16), rounding happens only twice per element, so the error of
the sum S = sum_i x_i over N ranks is bounded by :func:`error_bound`:

    |result - S| <= (2 u + N u32)(1 + u) sum_i |x_i| + (N + 1) a

with u the codec's unit roundoff (fp16: 2^-11, bf16: 2^-8), u32 = 2^-24 and a the largest error of rounding a
subnormal: fp16, 2^-25 2^-k <= 2^-39 max_i |x_i| summed (plus 2^-145 for the clamp of k to [-120, 120]);
bf16, 2^-134. NaN or Inf in a buffer raise FloatingPointError instead of travelling, as do values beyond
bfloat16's range.

Example
-------
>>> import numpy as np
>>> x = np.array([1e-6, 3.0, -70000.0], "float32")
>>> wire = np.empty(4, np.float16)
>>> FP16.encode(x, wire, np)                                  # scaled by 2^-2: -70000 fits
>>> FP16.decode(wire, np).tolist()
[9.5367431640625e-07, 3.0, -70016.0]
>>> bits = np.empty(1, np.uint16)
>>> BF16.encode(np.array([1 + 2 ** -8], "float32"), bits, np)  # halfway: rounds to even
>>> BF16.decode(bits, np).tolist()
[1.0]

Under ``mpiexec -n 2``:

>>> from mpi4py import MPI                                           # doctest: +SKIP
>>> from theanompi.comm.exchange.transport import MPITransport       # doctest: +SKIP
>>> ex = HalfExchanger(MPITransport(MPI.COMM_WORLD), BF16)          # doctest: +SKIP
>>> ex.allreduce_sum(np.full(4, 0.1, "float32"))                     # doctest: +SKIP
array([0.2, 0.2, 0.2, 0.2], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from theanompi.comm.exchange.base import Exchanger

U32 = 2.0 ** -24  # unit roundoff of float32
FP16_MAX = 65504.0
BF16_MAX = float(np.frombuffer(np.uint32(0x7F7F0000).tobytes(), np.float32)[0])  # largest finite bfloat16
MAX_SCALE_EXPONENT = 120  # |k| of fp16's scale 2^k: 2^120 is exact in float32


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


def _non_finite(what: str, codec: str) -> FloatingPointError:
    return FloatingPointError(f"{codec} exchange: {what} holds NaN/Inf or values beyond {codec}'s range; use "
                              "a full-precision exchange (BSP_COMPRESSION=none with BSP_EXCH_STRATEGY=ar, nccl32, "
                              "cudampi)")


def scale_exponent(peak: float) -> int:
    """k such that ``peak`` 2^k lies in [2^14, 2^15) (0 for 0), clamped to [-120, 120].

    >>> scale_exponent(1.0), scale_exponent(70000.0), scale_exponent(0.0)
    (14, -2, 0)
    """
    if peak == 0.0:
        return 0
    _, exponent = math.frexp(peak)  # peak = f 2^exponent, f in [0.5, 1)
    return max(-MAX_SCALE_EXPONENT, min(MAX_SCALE_EXPONENT, 15 - exponent))


class Fp16Codec:
    """IEEE fp16 with a power-of-two scale per message (its last element)."""

    name = "fp16"
    unit_roundoff = 2.0 ** -11
    wire_dtype = np.dtype(np.float16)
    extra = 1  # elements a message adds to its values: the scale's exponent

    def encode(self, values, out, xp) -> None:
        """Write ``values`` (1-D floats), scaled, and the scale's exponent into ``out`` (``values.size + 1``)."""
        peak = float(xp.max(xp.abs(values))) if values.size else 0.0
        if not math.isfinite(peak):
            raise _non_finite("a buffer", self.name)
        k = scale_exponent(peak)
        out[:-1] = values * values.dtype.type(2.0 ** k)
        out[-1] = k

    def decode(self, message, xp):
        """The float32 values of a message written by :meth:`encode`."""
        k = int(message[-1])
        return message[:-1].astype(np.float32) * np.float32(2.0 ** -k)

    def subnormal_error(self, peak: float) -> float:
        """The largest error of rounding a value of a message whose largest magnitude is ``peak``, beyond u|x|."""
        return 2.0 ** -39 * peak + 2.0 ** -145


class Bf16Codec:
    """bfloat16, rounded to nearest even, carried as the upper halves of float32 bit patterns."""

    name = "bf16"
    unit_roundoff = 2.0 ** -8
    wire_dtype = np.dtype(np.uint16)
    extra = 0

    def encode(self, values, out, xp) -> None:
        """Write ``values`` (1-D floats) rounded to bfloat16 into ``out`` (``values.size`` uint16)."""
        single = values.astype(np.float32, copy=False)
        if single.size and not float(xp.max(xp.abs(single))) <= BF16_MAX:  # NaN fails too
            raise _non_finite("a buffer", self.name)
        bits = single.view(np.uint32)
        halfway = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))  # ties go to the even neighbour
        out[...] = (bits + halfway) >> np.uint32(16)

    def decode(self, message, xp):
        """The float32 values of a message written by :meth:`encode`."""
        return (message.astype(np.uint32) << np.uint32(16)).view(np.float32)

    def subnormal_error(self, peak: float) -> float:
        return 2.0 ** -134


FP16 = Fp16Codec()
BF16 = Bf16Codec()
CODECS = {codec.name: codec for codec in (FP16, BF16)}


def error_bound(abs_sum, n_ranks: int, codec=FP16):
    """Element-wise bound on |16-bit allreduce result - exact sum| given sum_i |x_i| (see the module doc)."""
    u = codec.unit_roundoff
    peak = float(np.max(abs_sum)) if np.size(abs_sum) else 0.0
    return (2 * u + n_ranks * U32) * (1 + u) * abs_sum + (n_ranks + 1) * codec.subnormal_error(peak)


def allreduce_sum_16(buf, transport, codec=FP16):
    """Replace the float buffer ``buf`` by the sum over ``transport``'s ranks (16-bit traffic); return it."""
    xp, size, me = transport.xp, transport.size, transport.rank
    if size == 1:
        return buf
    if np.dtype(buf.dtype).kind != "f":
        raise ValueError(f"{codec.name} exchange compresses float buffers, got {buf.dtype}")
    bounds = chunk_bounds(buf.size, size)
    extra = codec.extra
    lo, hi = bounds[me], bounds[me + 1]
    others = [p for p in range(size) if p != me]
    owners = [p for p in others if bounds[p + 1] > bounds[p]]  # peers with a non-empty chunk
    mine = others if hi > lo else []  # peers that send me / receive from me my chunk

    def message(wire, p):  # chunk p's message in the wire buffer: its values, then `extra` elements
        return wire[bounds[p] + p * extra:bounds[p + 1] + (p + 1) * extra]

    wire = xp.empty(buf.size + size * extra, dtype=codec.wire_dtype)
    for p in owners:
        codec.encode(buf[bounds[p]:bounds[p + 1]], message(wire, p), xp)
    incoming = xp.empty((size, hi - lo + extra), dtype=codec.wire_dtype)
    transport.exchange_with_all(sends=[(p, message(wire, p)) for p in owners],
                                recvs=[(p, incoming[p]) for p in mine])
    if hi > lo:
        acc = buf[lo:hi].astype(np.promote_types(buf.dtype, np.float32))  # own contribution, unrounded
        for p in mine:  # ascending rank: a fixed summation order
            acc += codec.decode(incoming[p], xp)
        codec.encode(acc, message(wire, me), xp)
    transport.exchange_with_all(sends=[(p, message(wire, me)) for p in mine],
                                recvs=[(p, message(wire, p)) for p in owners])
    for p in range(size):
        if bounds[p + 1] > bounds[p]:
            buf[bounds[p]:bounds[p + 1]] = codec.decode(message(wire, p), xp)
    return buf


def payload_bytes_16(count: int, n_ranks: int, rank: int, codec=FP16) -> int:
    """Bytes rank ``rank`` sends in one :func:`allreduce_sum_16` of ``count`` elements over ``n_ranks``.

    >>> payload_bytes_16(1000, 2, 0, BF16), payload_bytes_16(1000, 2, 0, FP16)   # 2 (N-1)/N x 1000 x 2 bytes
    (2000, 2004)
    """
    if n_ranks == 1:
        return 0
    bounds = chunk_bounds(count, n_ranks)
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    scattered = sum(length + codec.extra for p, length in enumerate(lengths) if p != rank and length)
    gathered = (n_ranks - 1) * (lengths[rank] + codec.extra) if lengths[rank] else 0
    return codec.wire_dtype.itemsize * (scattered + gathered)


class HalfExchanger(Exchanger):
    """Allreduce with 16-bit traffic (``codec``: :data:`FP16` or :data:`BF16`) and fp32 accumulation over any
    :class:`~theanompi.comm.exchange.transport.Transport`.

    ``bcast`` stays full precision (it sets parameters, once).
    """

    def __init__(self, transport, codec=FP16):
        super().__init__()
        self.transport = transport
        self.sent = transport.sent  # the transport counts the chunks it sends
        self.codec = codec
        self.size = transport.size
        self.memory = "host" if transport.xp is np else "device"

    def allreduce_sum(self, buf):
        return allreduce_sum_16(buf, self.transport, self.codec)

    def bcast(self, buf, root: int = 0):
        if self.size > 1:
            self.transport.bcast(buf, root)
        return buf
