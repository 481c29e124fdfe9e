#!/bin/bash
# A PBS Pro / Torque batch job: `qsub examples/pbs_job.sh` from the repository root.
#PBS -N theanompi-bsp
#PBS -l select=2:ncpus=32:mpiprocs=4
#   Torque: #PBS -l nodes=2:ppn=4      (cpu workers: one per line of PBS_NODEFILE, 8 in all)
#PBS -l walltime=12:00:00
#PBS -j oe
set -euo pipefail

# the same virtualenv at the same path on every node, and the checkout (a shared file system)
source "$HOME/venvs/theanompi/bin/activate"
cd "$PBS_O_WORKDIR"

# DEVICES comes from PBS_NODEFILE (Torque's PBS_GPUFILE, when set, gives GPU workers);
# mpiexec starts its daemons on the other nodes over ssh
tmlauncher -cfg=examples/cluster.cfg --set RUN_DIR=runs/pbs-job
