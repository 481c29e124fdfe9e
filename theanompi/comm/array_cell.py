"""A parameter held as an immutable array (a ``jax.Array``) in a mutable cell: what JAX models expose as ``params``.

A JAX array cannot be written in place, so a model whose parameters are JAX arrays (the JAX and Keras-on-JAX
ModelClasses, :mod:`theanompi.models.jax_functional`) keeps each one in an :class:`ArrayCell` and reads the cells
before every compiled step; the rules, fused buffers, checkpoints and NaN checks write a parameter by putting a new
array into its cell (:class:`ArrayCellAccess`, the accessor :mod:`theanompi.comm.param_access` uses for cells).
The new array lives on jax's default device (the rank's one GPU, or the host), as the old one did.

Example
-------
>>> import jax.numpy as jnp, numpy as np
>>> cell = ArrayCell(jnp.zeros(3, "float32"), "dense.bias")
>>> ArrayCellAccess.assign(cell, np.arange(3, dtype="float64"), scale=2.0)
>>> type(cell.value).__name__, cell.value.dtype, cell.value.tolist(), ArrayCellAccess.name(cell)
('ArrayImpl', dtype('float32'), [0.0, 2.0, 4.0], 'dense.bias')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from theanompi.backend import arrays


class ArrayCell:
    """A mutable slot holding one immutable array (``value``) and the parameter's ``name``."""

    __slots__ = ("name", "value")

    def __init__(self, value: Any, name: str | None = None) -> None:
        self.value = value
        self.name = name

    def __repr__(self) -> str:
        return f"ArrayCell({self.name!r}, shape={tuple(self.value.shape)}, dtype={self.value.dtype})"


def jax_replacement(current: Any, value: Any, scale: float | None = None) -> Any:
    """A new ``jax.Array`` of ``current``'s dtype and shape holding ``value`` (times ``scale``), on jax's default
    device: what writing into an immutable JAX array means (here and for pytensor's JAX-mode shared variables)."""
    if scale is not None:
        value = value * np.dtype(current.dtype).type(scale)
    return arrays.to_jax(value, dtype=current.dtype, copy=True).reshape(current.shape)


class ArrayCellAccess:
    """Values of :class:`ArrayCell` s: the array itself (read it, don't keep it); writes replace it."""

    kind = "array cells"

    @staticmethod
    def value(cell: ArrayCell) -> Any:
        return cell.value

    @staticmethod
    def name(cell: ArrayCell) -> str | None:
        return cell.name

    @staticmethod
    def assign(cell: ArrayCell, value: Any, scale: float | None = None) -> None:
        cell.value = jax_replacement(cell.value, value, scale)
