"""Which memory an array lives in, and moving arrays between NumPy, JAX and CuPy.

theanompi meets three array kinds: NumPy (host), JAX arrays (pytensor's JAX
mode keeps parameters as ``jax.Array``; on a CPU jax they are host memory) and
CuPy arrays (fused buffers that NCCL and CUDA-aware MPI read and write on the
GPU). Conversions between JAX and CuPy go through DLPack without copies; jax
and cupy are imported only when an array of theirs shows up.

Example
-------
>>> import numpy as np
>>> x = np.arange(3, dtype="float32")
>>> kind(x), namespace_of(x).__name__
('numpy', 'numpy')
>>> to_host(x) is x
True
>>> import jax.numpy as jnp                                       # doctest: +SKIP
>>> kind(jnp.ones(2)), buffer_namespace(jnp.ones(2)).__name__    # on a CPU jax  # doctest: +SKIP
('jax', 'numpy')
"""

from __future__ import annotations

import sys
from types import ModuleType

import numpy as np


def kind(x) -> str:
    """'numpy', 'jax', 'cupy' or 'other' (without importing jax or cupy)."""
    if isinstance(x, np.ndarray):
        return "numpy"
    module = type(x).__module__.split(".", 1)[0]
    if module in ("jax", "jaxlib") and "jax" in sys.modules:
        import jax  # noqa: PLC0415 - jax is optional: looked at only once loaded

        if isinstance(x, jax.Array):
            return "jax"
    if module == "cupy":
        return "cupy"
    return "other"


def is_jax(x) -> bool:
    return kind(x) == "jax"


def is_cupy(x) -> bool:
    return kind(x) == "cupy"


def on_gpu(x) -> bool:
    """True for CuPy arrays and JAX arrays on a GPU."""
    k = kind(x)
    if k == "cupy":
        return True
    if k == "jax":
        return any(d.platform == "gpu" for d in x.devices())
    return False


def namespace_of(x) -> ModuleType:
    """The array module of ``x``'s own type: numpy or cupy (jax arrays are never written in place)."""
    if is_cupy(x):
        import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

        return cupy
    return np


def buffer_namespace(x) -> ModuleType:
    """The module whose mutable buffers can hold ``x``'s values in the same memory: cupy on a GPU, else numpy."""
    if on_gpu(x):
        import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

        return cupy
    return np


def to_host(x) -> np.ndarray:
    """A NumPy array with ``x``'s values (``x`` itself when it is one; a device-to-host copy for GPU arrays)."""
    if isinstance(x, np.ndarray):
        return x
    if is_cupy(x):
        return x.get()
    return np.asarray(x)


def as_buffer(x, xp: ModuleType):
    """``x`` as an array of module ``xp`` (numpy or cupy), sharing memory where the kinds allow.

    JAX -> CuPy goes through DLPack (zero copy; the view must only be read). A GPU
    array asked for as numpy is copied to the host.
    """
    if xp is np:
        return to_host(x)
    if is_cupy(x):
        return x
    if is_jax(x):
        x.block_until_ready()  # jax computes asynchronously on its own stream
    return xp.from_dlpack(x)


#: DLPack's device types of memory a CPU reads directly (kDLCPU, kDLCUDAHost pinned memory)
_DLPACK_HOST_DEVICES = (1, 3)


def dlpack_view(x):
    """An array sharing ``x``'s memory through DLPack, no copy: NumPy for host memory, CuPy for GPU memory.

    ``x`` is anything with ``__dlpack__`` (a torch tensor, a jax array, a NumPy or CuPy array). Writes into the
    view are writes into ``x``: only view memory that its owner lets others write (a torch tensor's, not a
    jax array's).

    >>> import torch
    >>> t = torch.zeros(3)
    >>> view = dlpack_view(t); view[1] = 5.0
    >>> type(view).__name__, t.tolist()
    ('ndarray', [0.0, 5.0, 0.0])
    """
    device_type, _ = x.__dlpack_device__()
    if int(device_type) in _DLPACK_HOST_DEVICES:
        return np.from_dlpack(x)
    import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

    return cupy.from_dlpack(x)


def to_jax(x, dtype=None, copy: bool = False):
    """A ``jax.Array`` with ``x``'s values on jax's default device.

    CuPy arrays are imported through DLPack (zero copy: jax then shares their
    memory, so pass ``copy=True`` when the CuPy buffer will be written again);
    NumPy arrays are transferred (always a copy on the device).
    """
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)
    import jax.numpy as jnp  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    if is_cupy(x):
        import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

        if dtype is not None and x.dtype != np.dtype(dtype):
            x = x.astype(dtype)
        elif copy:
            x = x.copy()
        cupy.cuda.get_current_stream().synchronize()  # NCCL/CuPy work on x is done before jax reads it
        return jax.dlpack.from_dlpack(x)
    if is_jax(x):
        out = x if dtype is None or x.dtype == np.dtype(dtype) else x.astype(dtype)
        return jnp.array(out, copy=True) if copy and out is x else out
    return jnp.array(np.asarray(x, dtype=dtype), copy=True)
