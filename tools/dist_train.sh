#!/usr/bin/env bash
# Multi-GPU / multi-node training on torchrun, as MMDetection's tools/dist_train.sh:
#   bash tools/dist_train.sh CONFIG GPUS [train.py options]
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 bash tools/dist_train.sh CONFIG 8
#   MAX_RESTARTS=3 bash tools/dist_train.sh CONFIG 8   # restart after a failure, resume by itself
# Environment (defaults): NNODES (1), NODE_RANK (0), MASTER_ADDR (127.0.0.1), PORT (29500),
# MAX_RESTARTS (0), SHUTDOWN_TIMEOUT (120: seconds torchrun gives its workers after SIGTERM
# before SIGKILL: the last iteration and the preemption checkpoint must fit), RDZV_ID (a job
# id shared by all nodes, for restarts across nodes), PYTHON (the project's .venv if present,
# else python). docs/cluster.md explains restarts and preemption.
set -euo pipefail
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
MAX_RESTARTS=${MAX_RESTARTS:-0}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python; fi
fi

if [ "$MAX_RESTARTS" -gt 0 ]; then
    # The c10d rendezvous restarts every node together when a process on one of them fails
    # (the static one restarts only the failed node). Node ranks are then assigned by the
    # rendezvous; the global ranks stay 0..N-1.
    RENDEZVOUS=(--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$PORT"
                --rdzv-id="${RDZV_ID:-${SLURM_JOB_ID:-cvt_mm}}")
else
    RENDEZVOUS=(--node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" --master_port="$PORT")
fi

# torchrun forwards these signals to the workers (sbatch --signal=USR1@90 sends SIGUSR1) and
# waits SHUTDOWN_TIMEOUT seconds for them; both are read from the environment, so a torchrun
# too old to know them ignores them.
PET_SIGNALS_TO_HANDLE=${PET_SIGNALS_TO_HANDLE:-SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1} \
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${SHUTDOWN_TIMEOUT:-120} \
PYTHONPATH="$ROOT:${PYTHONPATH:-}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --nproc_per_node="$GPUS" \
    --max-restarts="$MAX_RESTARTS" \
    "${RENDEZVOUS[@]}" \
    "$ROOT/tools/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
