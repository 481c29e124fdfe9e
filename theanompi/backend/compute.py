"""Compute modes: pytensor's C backend (``COMPUTE=c``) or its JAX mode (``COMPUTE=jax``).

``COMPUTE=auto`` (the default) picks ``c`` on cpu devices and ``jax`` on cuda
devices. A rank makes its compute mode the default of the process before it imports
the model file (:func:`set_default_compute`), so the functions a model compiles itself
(``pytensor.function`` without a mode: Theano-MPI's ``lib.opt``, Lasagne-style code,
the WGAN) run in it too. In JAX mode every compiled function runs under ``jax.jit`` and the
model's shared variables are kept as ``jax.Array`` on the rank's device: pytensor's
JAX linker passes each shared variable's ``container.storage[0]`` to the jitted
function and writes the update outputs (jax arrays) back into the same storage, so
once the storage holds a device array the parameters never travel to the host
between steps. ``set_value`` would turn a storage back into a NumPy array (a host
copy per call); :func:`theanompi.comm.fused_params.assign` writes device arrays instead.

Example
-------
>>> resolve_compute("auto", "cpu0"), resolve_compute("auto", "cuda1"), resolve_compute("jax", "cpu0")
('c', 'jax', 'jax')
>>> pytensor_mode("c") is None
True
>>> set_default_compute("c", "cpu0"); default_compute()       # the C backend: nothing changes
'c'
>>> set_default_compute("jax", "cuda0")    # doctest: +SKIP
>>> import pytensor, numpy as np                                   # doctest: +SKIP
>>> w = pytensor.shared(np.zeros(3, "float32"))                    # doctest: +SKIP
>>> keep_on_device([w]); type(w.get_value(borrow=True)).__name__   # doctest: +SKIP
'ArrayImpl'
"""

from __future__ import annotations

import importlib.util
import os
import warnings

import numpy as np

from theanompi.core.devices import Device
from theanompi.core.errors import ConfigError


def _is_cuda(device: str) -> bool:
    return device.rsplit(":", 1)[-1].startswith("cuda")


def resolve_compute(option: str | None, device: str) -> str:
    """'c' or 'jax' for COMPUTE=``option`` on ``device`` ('cpu0', 'host:cuda1', ...)."""
    option = option or "auto"
    if option != "auto":
        return option
    return "jax" if _is_cuda(device) else "c"


def check_compute(devices: list[Device], compute: str) -> None:
    """Launch-side checks of COMPUTE against the devices (ConfigError with one line).

    A cuda device computes through JAX: ``COMPUTE=c`` is refused for it, and a
    local cuda device needs jax installed (the ``[cuda]`` extra).
    """
    cuda = [d for d in devices if d.is_cuda]
    if cuda and compute == "c":
        raise ConfigError(f"COMPUTE='c' runs on the CPU, but {str(cuda[0])!r} is a GPU; "
                          "use COMPUTE=jax (or auto) with cuda devices")
    local_jax = [d for d in devices if d.is_local and resolve_compute(compute, str(d)) == "jax"]
    if local_jax and importlib.util.find_spec("jax") is None:
        extra = "theanompi[cuda]" if local_jax[0].is_cuda else "theanompi[jax]"
        raise ConfigError(f"COMPUTE=jax on {str(local_jax[0])!r} needs jax; install it with: pip install '{extra}'")


def pytensor_mode(compute: str):
    """The pytensor mode for ``compute``: None (the configured C backend) or the JAX mode."""
    if compute == "c":
        return None
    if compute != "jax":
        raise ValueError(f"compute mode {compute!r} is not one of: c, jax")
    from pytensor.compile.mode import get_mode  # noqa: PLC0415 - no pytensor at the launcher's import

    from theanompi.backend.ops import jax_dispatch  # noqa: PLC0415 - imports the ops (pytensor)

    jax_dispatch.register()  # our Conv2d/pooling Ops
    # Expected and harmless in every rank: pytensor drops its broadcast asserts under jit, and
    # float32 jax (x64 off, floatX float32) narrows pytensor's 64-bit accumulators/indices.
    warnings.filterwarnings("ignore", message="Skipping Assert", category=UserWarning)
    warnings.filterwarnings("ignore", message="Explicitly requested dtype (int|float)64", category=UserWarning)
    # A compiled JAX function keeps its own copy of each shared RNG (dropout's) and advances that copy every call,
    # so masks still change from step to step (tests/backend/test_jax_mode.py); pytensor warns once per function.
    warnings.filterwarnings("ignore", message="The RandomType SharedVariables", category=UserWarning)
    return get_mode("JAX")


_default = "c"


def default_compute() -> str:
    """This process's default compute mode: 'jax' once :func:`set_default_compute` made it so, else 'c'."""
    return _default


def set_default_compute(compute: str, device: str) -> None:
    """Make ``compute`` the default of this process: with 'jax', every pytensor function compiled from now on
    without a mode runs in the JAX mode, and every tensor shared variable created from now on lives on jax's
    device (:mod:`theanompi.backend.device_shared`). RuntimeError if a cuda ``device``'s jax sees no single GPU.

    Call it before the model file is imported (the rank does, in
    :func:`theanompi.runtime.model_build.build_model`); a Multiverso-style script calls it itself after
    pinning its GPU (``CUDA_VISIBLE_DEVICES``).
    """
    global _default
    if compute == "c":
        return
    mode = pytensor_mode(compute)  # registers the JAX implementations of our Ops
    check_jax_device(device)
    import pytensor  # noqa: PLC0415 - no pytensor at the launcher's import

    from theanompi.backend import device_shared  # noqa: PLC0415 - imports pytensor

    pytensor.config.mode = mode
    device_shared.install()
    _default = compute


def check_jax_device(device: str) -> str:
    """The platform jax computes on in this rank; RuntimeError if a cuda rank's jax sees no single GPU.

    The launcher pins each cuda rank with CUDA_VISIBLE_DEVICES, so its jax must see exactly one GPU.
    """
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    devs = jax.devices()
    platform = devs[0].platform
    if _is_cuda(device) and (platform != "gpu" or len(devs) != 1):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise RuntimeError(f"{device}: jax sees {len(devs)} {platform} device(s) (CUDA_VISIBLE_DEVICES={visible}); "
                           "a cuda worker needs a CUDA jax that sees its one GPU (pip install 'theanompi[cuda]')")
    return platform


def keep_on_device(shared_vars) -> None:
    """Replace each shared variable's storage with a ``jax.Array`` on jax's default device."""
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    for var in shared_vars:
        value = var.get_value(borrow=True)
        if isinstance(value, np.ndarray):  # tensors only (random generators stay as pytensor keeps them)
            var.container.storage[0] = jax.device_put(value)
