"""Run a benchmark script under the environment's mpiexec when it was started without one."""

from __future__ import annotations

import os
import subprocess
import sys


def relaunch_under_mpiexec(n_ranks: int) -> None:
    """If this process is not an MPI rank, re-run this script on ``n_ranks`` ranks and exit with its code."""
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        return
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    argv = [find_mpiexec(), "--oversubscribe", "--bind-to", "none", "-n", str(n_ranks), sys.executable, *sys.argv]
    sys.exit(subprocess.call(argv, env=mpiexec_env()))
