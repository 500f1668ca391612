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
# and `scancel --signal=TERM --full` work too: the script passes them on to the tasks.
# PYTHON selects the interpreter.
set -uo pipefail
CONFIG=$1
WORK_DIR=$2
ROOT=${SLURM_SUBMIT_DIR:-$(pwd)}  # sbatch runs a copy of this file from its spool folder
source "$ROOT/tools/misc/cpu_malloc.sh" || exit  # large freed blocks reused (CVT_MM_MALLOC=system: not)
PYTHON=${PYTHON:-python}
PREEMPTED=75  # cvt_mm.engine.PREEMPTED_EXIT_CODE

# Slurm's preemption (GraceTime) and --signal=USR1@N signal the tasks. --signal=B:USR1@N
# signals this shell, and `scancel --full` this shell's process group. srun answers SIGTERM by
# killing its tasks (SIGKILL), so it runs in a process group of its own (setsid: a background
# child of a script leads no group, so setsid neither forks nor changes $!) and this shell
# passes each signal on to the tasks of every step with scancel, not through srun. Without
# scancel on PATH, SIGUSR1 goes to srun, which forwards it to its tasks (they stop on either).
# A signal that comes between srun's start and `step=$!` (the trap runs between the two
# commands) is kept in `pending` and passed on once srun's pid is known.
relay() {
    relayed=1
    if command -v scancel >/dev/null; then
        echo "slurm_sbatch: SIG$1, passed on to the tasks"
        scancel --signal="$1" "$SLURM_JOB_ID"
    elif [ -z "$step" ]; then
        pending=$1
    else
        echo "slurm_sbatch: SIG$1, no scancel on PATH: passed on to the tasks as SIGUSR1 by srun"
        kill -s USR1 "$step"
    fi
}
step= relayed= pending=
trap 'relay TERM' TERM
trap 'relay USR1' USR1
PYTHONPATH="$ROOT:${PYTHONPATH:-}" setsid srun --kill-on-bad-exit=1 \
    "$PYTHON" -u "$ROOT/tools/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher=slurm \
    "${@:3}" &
step=$!
[ -z "$pending" ] || relay "$pending"
# `wait` returns early (> 128) when a trap has run; srun may also end while the trap runs
# (bash then keeps its status for the next `wait`). So wait until a wait ends with no relay
# during it: srun's own exit status.
while relayed=; wait "$step"; status=$?; [ "$status" -gt 128 ] && [ -n "$relayed" ]; do :; done
# The tasks have ended: a stop now has nothing to reach. `scontrol requeue` below makes slurm
# end the job's steps, this shell's with SIGTERM, and a slow machine may still be running it
# then; a relay would say it passed the signal on and fail ("Job can not be altered now").
ended() { echo "slurm_sbatch: SIG$1 after the tasks ended: nothing to pass on"; }
trap 'ended TERM' TERM
trap 'ended USR1' USR1
# A job that slurm itself is ending (plain `scancel JOB`, a time limit without --signal) is
# COMPLETING by now; `scontrol requeue` would bring even that one back, so a cancelled job
# could never be stopped. Only a job still RUNNING (its tasks stopped by a signal that asked
# for a checkpoint) is requeued.
if [ "$status" -eq "$PREEMPTED" ]; then
    state=$(scontrol show job "$SLURM_JOB_ID" --oneliner 2>/dev/null)
    [[ $state == *JobState=* ]] && state=${state##*JobState=} && state=${state%% *} || state=
    case $state in
    RUNNING | '')
        echo "slurm_sbatch: the tasks checkpointed and stopped; requeueing job $SLURM_JOB_ID"
        scontrol requeue "$SLURM_JOB_ID" ;;
    *)
        echo "slurm_sbatch: the tasks checkpointed and stopped; slurm is ending job" \
            "$SLURM_JOB_ID ($state: scancel, or a time limit without --signal)," \
            "so it is not requeued. Continue from the checkpoint with: sbatch ..." \
            "tools/slurm_sbatch.sh $CONFIG $WORK_DIR --resume" ;;
    esac
fi
exit "$status"
