#!/usr/bin/env bash
# A batch script for long slurm jobs that may be preempted or reach their time limit: every
# task checkpoints on SIGUSR1/SIGTERM and exits with 75, the job requeues itself, and the
# requeued job resumes from that checkpoint by itself (docs/cluster.md). Submit it from the
# repository root:
#   sbatch -p PARTITION --nodes=2 --ntasks-per-node=8 --gres=gpu:8 --cpus-per-task=5 \
#       --time=24:00:00 --signal=USR1@180 --requeue \
#       tools/slurm_sbatch.sh CONFIG WORK_DIR [train.py options]
# --signal=USR1@180 asks slurm to send SIGUSR1 to every task 180 s before the time limit;
# leave time for one iteration and one checkpoint. PYTHON selects the interpreter.
set -uo pipefail
CONFIG=$1
WORK_DIR=$2
ROOT=${SLURM_SUBMIT_DIR:-$(pwd)}  # sbatch runs a copy of this file from its spool folder
PYTHON=${PYTHON:-python}
PREEMPTED=75  # cvt_mm.engine.PREEMPTED_EXIT_CODE

# A preempting scheduler signals this shell too: outlive it to see how the tasks ended.
trap 'echo "slurm_sbatch: SIGTERM, waiting for the tasks to write their checkpoint"' TERM
PYTHONPATH="$ROOT:${PYTHONPATH:-}" srun --kill-on-bad-exit=1 \
    "$PYTHON" -u "$ROOT/tools/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher=slurm \
    "${@:3}" &
wait $!
status=$?
while [ "$status" -gt 128 ] && kill -0 $! 2>/dev/null; do wait $!; status=$?; done
if [ "$status" -eq "$PREEMPTED" ]; then
    echo "slurm_sbatch: the tasks checkpointed and stopped; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
