#!/usr/bin/env bash
# Training on a slurm cluster, as MMDetection's tools/slurm_train.sh:
#   GPUS=16 bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py options]
# GPUS (total), GPUS_PER_NODE, CPUS_PER_TASK, SRUN_ARGS and PYTHON may be set in the environment.
# The tasks checkpoint and exit with 75 on SIGTERM/SIGUSR1; for jobs that must requeue
# themselves after a preemption or at their time limit, submit tools/slurm_sbatch.sh with
# sbatch instead (docs/cluster.md).
set -euxo pipefail
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/tools/misc/cpu_malloc.sh"  # large freed blocks reused (CVT_MM_MALLOC=system: not)
PYTHON=${PYTHON:-python}

PYTHONPATH="$ROOT:${PYTHONPATH:-}" \
srun -p "${PARTITION}" \
    --job-name="${JOB_NAME}" \
    --gres=gpu:"${GPUS_PER_NODE}" \
    --ntasks="${GPUS}" \
    --ntasks-per-node="${GPUS_PER_NODE}" \
    --cpus-per-task="${CPUS_PER_TASK}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    "$PYTHON" -u "$ROOT/tools/train.py" "${CONFIG}" --work-dir="${WORK_DIR}" --launcher="slurm" "${@:5}"
