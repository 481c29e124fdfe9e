"""PowerSGD: each matrix exchanged as a rank-r product P Q^T, with error feedback.

Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed Optimization",
NeurIPS 2019 (arXiv:1905.13727), Algorithms 1 and 2: one step of subspace iteration per exchange, warm-started
from the previous exchange's Q. For each parameter of two or more dimensions, viewed as the matrix
M_i = (the buffer's slice + e_i) of shape (shape[0], prod(shape[1:])) on worker i, and r = min(rank, rows, cols):

1. P_i = M_i Q; P = sum_i P_i (one allreduce for all matrices, with the vectors below);
2. P^ = an orthonormal basis of P's columns (QR);
3. Q_i = M_i^T P^; the local error e_i <- M_i - P^ Q_i^T; Q = sum_i Q_i (a second allreduce);
4. the buffer's slice <- P^ Q^T = P^ P^^T sum_i M_i, and Q / N is the next exchange's start.

Vectors (biases), and matrices whose factors would not be smaller ((rows + cols) r >= rows cols), travel whole,
summed exactly in the first allreduce; they carry no error. Before iteration ``start_iter`` every buffer is summed
uncompressed and no error accumulates. Q starts as a standard normal matrix drawn from the session's seed, the
same on every worker; :meth:`PowerSGD.reset` goes back to that start with zero errors. Per exchange a worker sends
the sums of sum_j (rows_j + cols_j) r_j + (whole elements) values instead of the buffer's size.

The error here is Algorithm 2's (the worker's own matrix minus its projection onto the common subspace,
M_i - P^ P^^T M_i); PyTorch's ``powerSGD_hook`` keeps M_i minus the decompressed *mean* instead. The two differ
worker by worker but add up to the same total error.

Example
-------
>>> matrices, whole = plan_matrices([(64, 32), (32,), (2, 3, 2), (32, 10)], rank=2)
>>> [(m.start, m.rows, m.cols, m.rank) for m in matrices], whole     # a 2 x 6 matrix at rank 2 goes whole
([(0, 64, 32, 2), (2092, 32, 10, 2)], [(2048, 2092)])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from theanompi.comm.compression.base import Compressor
from theanompi.comm.exchange.base import Exchanger
from theanompi.core.errors import ContractError


@dataclass(frozen=True)
class MatrixSlot:
    """One compressed parameter: the buffer's ``[start:stop]`` as a ``rows`` x ``cols`` matrix of rank ``rank``;
    its P at ``p_offset`` of the first exchange's buffer, its Q at ``q_offset`` of the second's."""

    start: int
    rows: int
    cols: int
    rank: int
    p_offset: int
    q_offset: int

    @property
    def stop(self) -> int:
        return self.start + self.rows * self.cols


def plan_matrices(shapes: list[tuple[int, ...]], rank: int) -> tuple[list[MatrixSlot], list[tuple[int, int]]]:
    """The parameters (of ``shapes``, laid out one after the other) that PowerSGD compresses, and the spans of the
    buffer that travel whole (contiguous runs merged)."""
    matrices: list[MatrixSlot] = []
    whole: list[tuple[int, int]] = []
    start = p_offset = q_offset = 0
    for shape in shapes:
        size = int(np.prod(shape))
        rows = int(shape[0]) if len(shape) >= 2 else 0
        cols = size // rows if rows else 0
        r = min(rank, rows, cols)
        if len(shape) >= 2 and (rows + cols) * r < rows * cols:
            matrices.append(MatrixSlot(start, rows, cols, r, p_offset, q_offset))
            p_offset, q_offset = p_offset + rows * r, q_offset + cols * r
        elif size:
            if whole and whole[-1][1] == start:
                whole[-1] = (whole[-1][0], start + size)
            else:
                whole.append((start, start + size))
        start += size
    return matrices, whole


def orthonormal_columns(p: np.ndarray) -> np.ndarray:
    """An orthonormal basis of ``p``'s column space (``p``'s shape; reduced QR)."""
    q, _ = np.linalg.qr(p)
    return q


class PowerSGD(Compressor):
    """Rank-``rank`` PowerSGD with error feedback over ``exchanger`` for buffers laid out as ``shapes``.

    ``start_iter``: iterations before it are summed uncompressed. ``seed``: Q's start (the same on every worker).
    The state (Q and the errors) is made at the first compressed exchange.
    """

    name = "powersgd"

    def __init__(self, exchanger: Exchanger, shapes: list[tuple[int, ...]], rank: int, start_iter: int,
                 seed: int, dtype: Any = np.float32):
        super().__init__(exchanger)
        self.matrices, self.whole = plan_matrices(shapes, rank)
        self.start_iter = start_iter
        self.seed = seed
        self.dtype = np.dtype(dtype)
        self.qs: list[np.ndarray] = []
        self.errors: list[np.ndarray] = []

    @property
    def p_size(self) -> int:
        return sum(m.rows * m.rank for m in self.matrices)

    @property
    def q_size(self) -> int:
        return sum(m.cols * m.rank for m in self.matrices)

    @property
    def whole_size(self) -> int:
        return sum(stop - start for start, stop in self.whole)

    def reset(self) -> None:
        """Zero errors and Q back at its seeded start."""
        rng = np.random.default_rng(self.seed)
        self.qs = [rng.standard_normal((m.cols, m.rank)).astype(self.dtype) for m in self.matrices]
        self.errors = [np.zeros((m.rows, m.cols), self.dtype) for m in self.matrices]

    def allreduce_sum(self, buf: Any, iteration: int) -> Any:
        if not isinstance(buf, np.ndarray):
            raise ContractError(f"BSP_COMPRESSION=powersgd sums host (NumPy) buffers, got {type(buf).__name__}")
        if iteration < self.start_iter or not self.matrices:
            return self.exchanger.allreduce_sum(buf)
        if not self.qs:
            self.reset()
        first = np.empty(self.p_size + self.whole_size, self.dtype)  # every P, then the spans that go whole
        second = np.empty(self.q_size, self.dtype)  # every Q
        views = [buf[m.start:m.stop].reshape(m.rows, m.cols) for m in self.matrices]
        for m, view, error, q in zip(self.matrices, views, self.errors, self.qs):
            view += error  # M_i: the buffer with the error fed back
            np.matmul(view, q, out=first[m.p_offset:m.p_offset + m.rows * m.rank].reshape(m.rows, m.rank))
        self._spans(buf, first, gather=True)
        self.exchanger.allreduce_sum(first)
        self._spans(buf, first, gather=False)
        bases = []
        for m, view, error in zip(self.matrices, views, self.errors):
            basis = orthonormal_columns(first[m.p_offset:m.p_offset + m.rows * m.rank].reshape(m.rows, m.rank))
            local_q = second[m.q_offset:m.q_offset + m.cols * m.rank].reshape(m.cols, m.rank)
            np.matmul(view.T, basis, out=local_q)
            np.subtract(view, basis @ local_q.T, out=error)  # what this worker's matrix loses in the projection
            bases.append(basis)
        self.exchanger.allreduce_sum(second)
        scale = self.dtype.type(1.0 / self.exchanger.size)
        for m, view, basis, q in zip(self.matrices, views, bases, self.qs):
            summed_q = second[m.q_offset:m.q_offset + m.cols * m.rank].reshape(m.cols, m.rank)
            np.matmul(basis, summed_q.T, out=view)
            np.multiply(summed_q, scale, out=q)  # the warm start of the next exchange
        return buf

    def _spans(self, buf: np.ndarray, first: np.ndarray, gather: bool) -> None:
        """Copy the spans that travel whole from ``buf`` into ``first`` after the Ps (``gather``), or back."""
        offset = self.p_size
        for start, stop in self.whole:
            if gather:
                first[offset:offset + stop - start] = buf[start:stop]
            else:
                buf[start:stop] = first[offset:offset + stop - start]
            offset += stop - start

    def state(self) -> dict[str, np.ndarray]:
        """Q and the errors, each concatenated flat (``{}`` before the first compressed exchange)."""
        if not self.qs:
            return {}
        return {"powersgd_q": np.concatenate([q.ravel() for q in self.qs]),
                "powersgd_error": np.concatenate([e.ravel() for e in self.errors])}

    def load_state(self, state: dict[str, Any]) -> None:
        if "powersgd_q" not in state:
            self.qs, self.errors = [], []
            return
        q_flat, error_flat = np.asarray(state["powersgd_q"]), np.asarray(state["powersgd_error"])
        if q_flat.size != self.q_size or error_flat.size != sum(m.rows * m.cols for m in self.matrices):
            raise ContractError(f"the checkpoint's PowerSGD state has {q_flat.size} Q and {error_flat.size} error "
                                f"values; BSP_POWERSGD_RANK and the model give {self.q_size} and "
                                f"{sum(m.rows * m.cols for m in self.matrices)}")
        self.qs, self.errors = [], []
        for m in self.matrices:
            self.qs.append(q_flat[m.q_offset:m.q_offset + m.cols * m.rank].reshape(m.cols, m.rank)
                           .astype(self.dtype))
        offset = 0
        for m in self.matrices:
            self.errors.append(error_flat[offset:offset + m.rows * m.cols].reshape(m.rows, m.cols).astype(self.dtype))
            offset += m.rows * m.cols
