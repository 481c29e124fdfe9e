"""The compute backend: how pytensor is configured, compiles and runs (imports :mod:`theanompi.core` only).

* :mod:`~theanompi.backend.pytensor_config` -- pytensor's flags, BLAS, compile directory (:func:`configure_pytensor`);
* :mod:`~theanompi.backend.compute` -- the compute modes (``COMPUTE=c``: C code; ``COMPUTE=jax``: JAX mode with the
  parameters on the device) and keeping shared variables on a device;
* :mod:`~theanompi.backend.arrays` -- which memory an array lives in (NumPy, JAX, CuPy) and moving it;
* :mod:`~theanompi.backend.function_cache` (the key: :mod:`~theanompi.backend.graph_signature`; the entries on disk:
  :mod:`~theanompi.backend.function_store`; what their pickles may name: :mod:`~theanompi.backend.graph_pickles`),
  :mod:`~theanompi.backend.module_preload`, :mod:`~theanompi.backend.march_flags` -- compiling once per machine, not
  once per process;
* :mod:`~theanompi.backend.ops` -- the convolution, pooling, batch-norm and momentum Ops with their C sources, and
  their JAX implementations (:mod:`~theanompi.backend.ops.jax_dispatch`).

``from theanompi.backend import configure_pytensor`` is the public spelling (the Theano-to-pytensor table of the docs).

Example
-------
>>> from theanompi.backend import configure_pytensor
>>> configure_pytensor()  # before `import pytensor`: C backend, BLAS, shared compile cache  # doctest: +SKIP
PosixPath('/root/.cache/theanompi/pytensorrc-...')
"""

from theanompi.backend.pytensor_config import configure_pytensor, ensure_pytensor_configured

__all__ = ["configure_pytensor", "ensure_pytensor_configured"]
