#!/usr/bin/env bash
# A batch script for long slurm jobs that may be preempted or reach their time limit: every
# task checkpoints on SIGUSR1/SIGTERM and exits with 75, the job requeues itself, and the
# requeued job resumes from that checkpoint by itself (docs/cluster.md). Submit it from the
# repository root:
#   sbatch -p PARTITION --nodes=2 --ntasks-per-node=8 --gres=gpu:8 --cpus-per-task=5 \
#       --time=24:00:00 --signal=USR1@180 --requeue \
#       tools/slurm_sbatch.sh CONFIG WORK_DIR [train.py options]
# --signal=USR1@180 asks slurm to send SIGUSR1 to every task 180 s before the time limit;
# leave time for one iteration and one checkpoint. --signal=B:USR1@180 (to this script only)
# works too: the script passes it on to the tasks. PYTHON selects the interpreter.
set -uo pipefail
CONFIG=$1
WORK_DIR=$2
ROOT=${SLURM_SUBMIT_DIR:-$(pwd)}  # sbatch runs a copy of this file from its spool folder
PYTHON=${PYTHON:-python}
PREEMPTED=75  # cvt_mm.engine.PREEMPTED_EXIT_CODE

# Slurm's preemption (GraceTime) signals the tasks, not this shell. `scancel --full` also
# signals this shell and srun, and srun answers SIGTERM by killing its tasks: then nothing
# can be saved (docs/cluster.md). Outlive a SIGTERM to see how the tasks ended.
trap 'echo "slurm_sbatch: SIGTERM, waiting for the tasks"' TERM
trap 'echo "slurm_sbatch: SIGUSR1, passed on to the tasks"; kill -USR1 "$step" 2>/dev/null' USR1
PYTHONPATH="$ROOT:${PYTHONPATH:-}" srun --kill-on-bad-exit=1 \
    "$PYTHON" -u "$ROOT/tools/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher=slurm \
    "${@:3}" &
step=$!
wait "$step"
status=$?
# `wait` returns early (> 128) when this shell is signalled; wait again for srun itself.
while [ "$status" -gt 128 ] && kill -0 "$step" 2>/dev/null; do wait "$step"; status=$?; done
if [ "$status" -eq "$PREEMPTED" ]; then
    echo "slurm_sbatch: the tasks checkpointed and stopped; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
