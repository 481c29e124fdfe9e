"""Reading and writing a model's parameters, whatever holds them: pytensor shared variables, torch tensors or
the array cells of JAX models.

Every place that touches parameter values (fused buffers, checkpoints, the final
model, the contract check) goes through the functions here, so a ModelClass may
expose either kind in ``params`` / ``state_vars``:

* pytensor shared variables: the value is the variable's storage (NumPy, or a
  ``jax.Array`` in JAX mode); writes go into that storage (see :func:`assign`).
* ``torch.Tensor`` (``nn.Parameter`` included): the value is a view of the
  tensor's memory -- a NumPy array for a CPU tensor, a CuPy array for a CUDA
  tensor (through DLPack, no copy) -- and writes go into that memory in place,
  so the module, its autograd graph and any optimizer keep the same tensors.
* :class:`~theanompi.comm.array_cell.ArrayCell` (the JAX and Keras-on-JAX models' params): the value is the
  ``jax.Array`` the cell holds; a write puts a new array into the cell (JAX arrays are immutable).

torch is never imported here: a tensor is recognised by its type's module, and
only then is torch (already loaded by the model) consulted.

Example
-------
>>> import numpy as np, pytensor
>>> w = pytensor.shared(np.zeros(3, "float32"), name="w")
>>> assign(w, np.ones(3, "float32"), scale=2.0)
>>> current_value(w).tolist(), param_name(w)
([2.0, 2.0, 2.0], 'w')
>>> import torch
>>> t = torch.zeros(3)
>>> assign(t, np.arange(3, dtype="float32")); t.tolist()
[0.0, 1.0, 2.0]
>>> np.shares_memory(current_value(t), t.numpy())   # a view of the tensor's memory, not a copy
True
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from theanompi.backend import arrays
from theanompi.comm.array_cell import ArrayCell, ArrayCellAccess, jax_replacement
from theanompi.core.errors import ContractError


def is_torch_tensor(var) -> bool:
    """True for a ``torch.Tensor`` (without importing torch when the model did not)."""
    if "torch" not in sys.modules or not any(c.__module__.startswith("torch") for c in type(var).__mro__):
        return False  # (a user's Parameter subclass still has torch's classes in its MRO)
    import torch  # noqa: PLC0415 - only once a model loaded torch

    return isinstance(var, torch.Tensor)


def is_shared_variable(var) -> bool:
    """True for a pytensor shared variable."""
    if "pytensor" not in sys.modules:
        return False
    from pytensor.compile.sharedvalue import SharedVariable  # noqa: PLC0415 - only once a model loaded pytensor

    return isinstance(var, SharedVariable)


class SharedVariableAccess:
    """Values of pytensor shared variables: their storage, written in place where it can take it."""

    kind = "pytensor shared variables"

    @staticmethod
    def value(var):
        return var.get_value(borrow=True)

    @staticmethod
    def name(var) -> str | None:
        return var.name

    @staticmethod
    def assign(var, value, scale: float | None = None) -> None:
        """Write into the current storage: replacing it with ``set_value`` after compilation
        measurably slows later calls (24 vs 16 ms per CNN step here). A ``jax.Array`` storage
        (JAX mode, immutable) gets a new jax array on its device; a NumPy storage that cannot
        take the value in place (other shape or dtype, read-only) falls back to ``set_value``."""
        storage = var.get_value(borrow=True)
        if arrays.is_jax(storage):
            var.container.storage[0] = jax_replacement(storage, value, scale)
            return
        value = arrays.to_host(value)
        if (isinstance(storage, np.ndarray) and storage.shape == np.shape(value) and storage.flags.writeable
                and storage.dtype == np.asarray(value).dtype):
            _write_numpy(storage, value, scale)
            return
        dtype = getattr(storage, "dtype", None)
        new = np.array(value, dtype=dtype) if scale is None else np.multiply(value, scale, dtype=dtype)
        var.set_value(new, borrow=True)


class TorchTensorAccess:
    """Values of torch tensors: NumPy (CPU) or CuPy (CUDA, via DLPack) views of their memory."""

    kind = "torch tensors"

    @staticmethod
    def value(var):
        data = var.detach()
        if data.is_cuda:
            import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

            return cupy.from_dlpack(data)  # shares the tensor's memory (not run here: no GPU)
        return data.numpy()

    @staticmethod
    def name(var) -> str | None:
        return getattr(var, "param_name", None)

    @staticmethod
    def assign(var, value, scale: float | None = None) -> None:
        view = TorchTensorAccess.value(var)
        if tuple(view.shape) != tuple(np.shape(value)):
            value = value.reshape(view.shape)
        xp = arrays.namespace_of(view)
        if xp is np:
            _write_numpy(view, arrays.to_host(value), scale)
            return
        value = arrays.as_buffer(value, xp)
        if scale is None:
            xp.copyto(view, value, casting="unsafe")
        else:
            xp.multiply(value, view.dtype.type(scale), out=view, casting="unsafe")


def _write_numpy(out: np.ndarray, value, scale: float | None) -> None:
    if scale is None:
        np.copyto(out, value, casting="unsafe")
    else:
        np.multiply(value, out.dtype.type(scale), out=out, casting="unsafe")


def access_for(var):
    """The accessor of ``var``'s kind; TypeError naming the type for anything else."""
    if is_torch_tensor(var):
        return TorchTensorAccess
    if is_shared_variable(var):
        return SharedVariableAccess
    if isinstance(var, ArrayCell):  # JAX models' params (theanompi.models.jax_functional)
        return ArrayCellAccess
    raise TypeError(f"{type(var).__name__} is neither a pytensor shared variable, a torch.Tensor nor an ArrayCell")


def current_value(var: Any) -> Any:
    """``var``'s value in its own memory, not copied (NumPy, CuPy or jax array): read it, don't keep it."""
    return access_for(var).value(var)


def host_copy(var) -> np.ndarray:
    """A NumPy copy of ``var``'s value (for checkpoints and the final model)."""
    return np.array(arrays.to_host(current_value(var)))


def assign(var, value, scale: float | None = None) -> None:
    """Set ``var`` to ``value`` (times ``scale``) in place, keeping its dtype and memory."""
    access_for(var).assign(var, value, scale)


def param_name(var) -> str | None:
    """``var``'s name (a torch tensor's ``param_name`` attribute), None if it has none."""
    return access_for(var).name(var)


def check_params(params, owner: str) -> None:
    """ContractError unless ``params`` are all of one supported kind (``owner`` names the model).

    Example
    -------
    >>> check_params([1.0], "ModelClass 'M'")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ContractError: ModelClass 'M': params[0] is float, not a pytensor shared variable, a ...
    """
    kinds = set()
    for i, p in enumerate(params):
        try:
            kinds.add(access_for(p).kind)
        except TypeError:
            raise ContractError(f"{owner}: params[{i}] is {type(p).__name__}, not a pytensor shared variable, "
                                "a torch.Tensor or an ArrayCell") from None
    if len(kinds) > 1:
        raise ContractError(f"{owner}: params mix {' and '.join(sorted(kinds))}; use one kind")
