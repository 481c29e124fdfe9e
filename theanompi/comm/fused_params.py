"""A model's parameters <-> one contiguous flat buffer (tensor fusion).

Exchanging one fused buffer costs one collective instead of one per parameter.

Example
-------
>>> import numpy as np, pytensor
>>> params = [pytensor.shared(np.ones((2, 3), "float32")), pytensor.shared(np.zeros(4, "float32"))]
>>> fused = FusedParams(params)
>>> flat = fused.read()
>>> flat.shape, flat.dtype
((10,), dtype('float32'))
>>> fused.write(flat * 2)
>>> float(params[0].get_value()[0, 0])
2.0

With pytensor's JAX mode the params hold ``jax.Array`` objects. ``FusedParams(params,
where="device")`` then keeps the fused buffer in the params' memory: a CuPy array on
a GPU (filled from the params through DLPack, no host copy), a NumPy array on a CPU
jax; ``where="host"`` (the default) always gives a NumPy buffer. Code that works on
the buffer uses ``fused.xp`` (numpy or cupy) for its arithmetic.

The params may also be ``torch.Tensor`` s (:mod:`theanompi.comm.param_access`): the buffer
is then filled from, and written back into, the tensors' memory (CuPy for CUDA tensors).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from theanompi.backend import arrays
from theanompi.comm.param_access import assign, current_value, param_name
from theanompi.core.errors import ContractError

__all__ = ["WHERE", "FlatLayout", "FusedParams", "assign"]  # assign: re-exported (models import it from here)

#: Where a fused buffer may live (see :class:`FusedParams`).
WHERE = ("host", "device")


class FlatLayout:
    """Offsets of arrays of given shapes inside one 1-D buffer."""

    def __init__(self, shapes: list[tuple[int, ...]]):
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int).tolist()
        self.total = self.offsets[-1]

    def pack(self, values, out):
        """Copy ``values`` into ``out`` (1-D, length ``total``; a NumPy or CuPy array)."""
        for arr, start, stop in zip(values, self.offsets, self.offsets[1:]):
            out[start:stop] = arr.reshape(-1) if hasattr(arr, "reshape") else np.ravel(arr)
        return out

    def views(self, flat) -> list:
        """Shaped views into ``flat`` (no copies)."""
        return [
            flat[start:stop].reshape(shape)
            for start, stop, shape in zip(self.offsets, self.offsets[1:], self.shapes)
        ]


class FusedParams:
    """Read all params into one flat buffer and write a flat buffer back.

    All params must share one dtype (one buffer, one collective). ``where="host"``
    keeps the buffer in host memory (NumPy); ``where="device"`` keeps it where the
    params are (CuPy for JAX params on a GPU, else NumPy). :attr:`xp` is the buffer's
    array module.
    """

    def __init__(self, params, where: str = "host"):
        if where not in WHERE:
            raise ValueError(f"where={where!r} is not one of: {', '.join(WHERE)}")
        self.params = list(params)
        values = [current_value(p) for p in self.params]
        dtypes = {np.dtype(v.dtype) for v in values}
        if len(dtypes) != 1:
            names = ", ".join(f"{param_name(p) or i}:{v.dtype}" for i, (p, v) in enumerate(zip(self.params, values)))
            raise ContractError(f"params must share one dtype to be fused; got {names}")
        self.dtype = dtypes.pop()
        self.where = where
        self.xp = arrays.buffer_namespace(values[0]) if where == "device" else np
        self.layout = FlatLayout([v.shape for v in values])
        self.buffer = self.xp.empty(self.layout.total, dtype=self.dtype)

    @property
    def size(self) -> int:
        return self.layout.total

    @property
    def on_gpu(self) -> bool:
        """Whether the buffer is GPU memory (a CuPy array)."""
        return self.xp is not np

    def non_finite(self, flat, span: tuple[int, int] | None = None) -> str | None:
        """None if ``flat`` (laid out like the params) is all finite, else the first bad param's name.

        One reduction over the buffer on the fast path; the per-param search runs only when the
        sum is not finite (a sum that overflowed on finite values is cleared by that search).
        ``flat`` may be a NumPy, CuPy or JAX array. ``span=(start, stop)`` checks only ``flat[start:stop]``
        (one bucket of an overlapped exchange).
        """
        flat = arrays.as_buffer(flat, self.xp)
        if np.dtype(flat.dtype).kind != "f":
            return None
        xp = self.xp
        start, stop = span if span is not None else (0, self.size)
        with np.errstate(over="ignore", invalid="ignore"):
            if bool(xp.isfinite(xp.sum(flat[start:stop]))):
                return None
        offsets = self.layout.offsets
        for i, (lo, hi) in enumerate(zip(offsets, offsets[1:])):
            lo, hi = max(lo, start), min(hi, stop)
            if lo < hi and not bool(xp.isfinite(flat[lo:hi]).all()):
                name = param_name(self.params[i]) or "unnamed"
                return f"{name!r} (params[{i}])"
        return None

    def read(self) -> Any:
        """Current parameter values packed into the (reused) fused buffer (a NumPy or CuPy array: :attr:`xp`)."""
        values = (arrays.as_buffer(current_value(p), self.xp) for p in self.params)
        return self.layout.pack(values, self.buffer)

    def stage(self, vector):
        """A writable fused-layout buffer in this buffer's memory holding ``vector`` (e.g. an update vector).

        ``vector`` itself when it already is one -- a NumPy array for a host buffer (a C-mode gradient, a CPU
        torch model's flat gradient), a CuPy array for a GPU buffer (a GPU torch model's flat gradient through
        DLPack): no copy, the exchange sums into the model's own buffer -- else its values copied into the reused
        :attr:`buffer` (from a JAX array, which must not be written: through DLPack on a GPU, a host copy on a
        CPU jax).
        """
        if self._is_writable_buffer(vector):
            return vector
        self.buffer[...] = arrays.as_buffer(vector, self.xp)
        return self.buffer

    def _is_writable_buffer(self, vector) -> bool:
        if self.xp is np:
            return isinstance(vector, np.ndarray) and vector.flags.writeable and vector.flags.c_contiguous
        return (arrays.is_cupy(vector) and vector.flags.c_contiguous and vector.dtype == self.dtype
                and vector.size == self.size)

    def write(self, flat, scale: float | None = None) -> None:
        """Set every param from ``flat`` (times ``scale``, fused into the copy); ``flat`` may be reused."""
        for p, view in zip(self.params, self.layout.views(flat)):
            assign(p, view, scale)
