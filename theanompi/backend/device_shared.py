"""Shared variables that live on jax's device: every ``pytensor.shared`` tensor a JAX-mode rank creates.

pytensor's JAX linker hands each shared variable's storage to the jitted function
and writes the update outputs (jax arrays) back into it. A storage holding a NumPy
array is copied to the device at every call, and ``set_value`` puts a NumPy array
back there. :func:`install` makes ``pytensor.shared`` of an array or a number return a
:class:`DeviceSharedVariable` instead: its storage is a ``jax.Array`` from the start,
``set_value`` moves the new value to the device once (an explicit ``jax.device_put``),
``get_value()`` returns a NumPy copy of the pytensor type's dtype, and
``get_value(borrow=True)`` the ``jax.Array`` itself. Models that compile their own
functions (Theano-MPI's ``lib.opt``, Lasagne-style code, Multiverso-style scripts) then
keep parameters, momenta, learning rates and the file batches they set on the device.

Values are narrowed to what jax computes with (float64 -> float32, int64 -> int32 while
jax's x64 is off, as JAX mode computes anyway); random generators and other objects stay
as pytensor keeps them. :func:`install` is what ``set_default_compute("jax", device)``
(:mod:`theanompi.backend.compute`) calls before a rank imports the model file.

Example
-------
>>> import numpy as np, pytensor
>>> install()
>>> w = pytensor.shared(np.zeros(3, "float32"), name="w")
>>> type(w).__name__, type(w.get_value(borrow=True)).__name__
('DeviceSharedVariable', 'ArrayImpl')
>>> w.set_value(np.ones(3, "float32")); w.get_value()
array([1., 1., 1.], dtype=float32)
>>> uninstall(); type(pytensor.shared(np.zeros(3, "float32"))).__name__
'TensorSharedVariable'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pytensor.compile.sharedvalue import shared_constructor
from pytensor.tensor.sharedvar import TensorSharedVariable

from theanompi.backend import arrays

#: the value types whose pytensor constructors are wrapped (arrays, NumPy scalars, Python numbers)
VALUE_TYPES = (np.ndarray, np.number, float, int)

_originals: dict[type, Callable[..., Any]] = {}


def to_device(value, dtype):
    """``value`` as a ``jax.Array`` on jax's default device, of ``dtype`` as jax holds it (one explicit transfer)."""
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    dtype = jax.dtypes.canonicalize_dtype(np.dtype(dtype))
    if arrays.is_jax(value):
        return value if value.dtype == dtype else value.astype(dtype)
    return jax.device_put(np.asarray(arrays.to_host(value), dtype=dtype))


class DeviceSharedVariable(TensorSharedVariable):
    """A tensor shared variable whose storage is a ``jax.Array`` (see the module doc)."""

    def get_value(self, borrow: bool = False, return_internal_type: bool = False):
        """The ``jax.Array`` itself with ``borrow`` (or ``return_internal_type``), else a NumPy copy."""
        value = self.container.storage[0]
        if borrow or return_internal_type:
            return value
        return np.array(arrays.to_host(value), dtype=self.type.dtype)

    def set_value(self, new_value, borrow: bool = False) -> None:
        """Check ``new_value`` against the variable's type, then keep it on the device."""
        if not arrays.is_jax(new_value):
            container = self.container
            new_value = self.type.filter(arrays.to_host(new_value), strict=container.strict,
                                         allow_downcast=container.allow_downcast)
        self.container.storage[0] = to_device(new_value, self.type.dtype)


def _on_device(original):
    def constructor(value, *args, **kwargs):
        var = original(value, *args, **kwargs)
        if type(var) is TensorSharedVariable:  # pytensor chose the type; only the storage moves
            var.__class__ = DeviceSharedVariable  # adds methods, no state: the variable stays what pytensor made
            var.container.storage[0] = to_device(var.container.storage[0], var.type.dtype)
        return var

    return constructor


def install() -> None:
    """Make ``pytensor.shared`` of arrays and numbers create :class:`DeviceSharedVariable` s (idempotent)."""
    if _originals:
        return
    for value_type in VALUE_TYPES:
        original = shared_constructor.dispatch(value_type)
        _originals[value_type] = original
        shared_constructor.register(value_type)(_on_device(original))


def uninstall() -> None:
    """Give ``pytensor.shared`` its own constructors back (variables already made stay on the device)."""
    for value_type, original in _originals.items():
        shared_constructor.register(value_type)(original)
    _originals.clear()


def is_installed() -> bool:
    return bool(_originals)
