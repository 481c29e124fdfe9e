#!/bin/bash
# A Slurm batch job: `sbatch examples/slurm_job.sh` from the repository root.
#SBATCH --job-name=theanompi-bsp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4         # cpu workers: one per task, 8 in all
#SBATCH --cpus-per-task=8           # each worker's share of its node's cores
##SBATCH --gpus-per-node=4          # GPU workers instead: one per GPU (cuda0..cuda3 on each node)
#SBATCH --time=12:00:00
#SBATCH --output=%x-%j.log          # a log, not a terminal: PROGRESS_EVERY lines show each epoch moving
set -euo pipefail

# the same virtualenv at the same path on every node, and the checkout (a shared file system)
source "$HOME/venvs/theanompi/bin/activate"
cd "$SLURM_SUBMIT_DIR"

# optional: the network between the nodes (see "Network" in docs/several-hosts.md)
# export OMPI_MCA_btl_tcp_if_include=ib0 PRTE_MCA_prte_if_include=ib0

# DEVICES comes from the allocation (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE or SLURM_GPUS_ON_NODE);
# mpiexec starts its daemons on the other nodes through srun
tmlauncher -cfg=examples/cluster.cfg --set RUN_DIR=runs/slurm-job
