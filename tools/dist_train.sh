#!/usr/bin/env bash
# Multi-GPU / multi-node training on torchrun, as MMDetection's tools/dist_train.sh:
#   bash tools/dist_train.sh CONFIG GPUS [train.py options]
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 bash tools/dist_train.sh CONFIG 8
#   MAX_RESTARTS=3 bash tools/dist_train.sh CONFIG 8   # restart after a failure, resume by itself
# Environment (defaults): NNODES (1), NODE_RANK (0; under srun, SLURM_NODEID), MASTER_ADDR
# (127.0.0.1: node 0's address), PORT (29500), LOCAL_ADDR (with MAX_RESTARTS: the address
# other nodes reach this one at; MASTER_ADDR on node 0, else the host name), MAX_RESTARTS
# (0), SHUTDOWN_TIMEOUT (120: seconds torchrun gives its workers after SIGTERM
# before SIGKILL: the last iteration and the preemption checkpoint must fit), RDZV_ID (a job
# id shared by all nodes, for restarts across nodes), PYTHON (the project's .venv if present,
# else python). docs/cluster.md explains restarts and preemption.
set -euo pipefail
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
# Empty: not said (the c10d rendezvous then guesses which node hosts its store).
NODE_RANK=${NODE_RANK:-${SLURM_NODEID:-}}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
MAX_RESTARTS=${MAX_RESTARTS:-0}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/tools/misc/cpu_malloc.sh"  # large freed blocks reused (CVT_MM_MALLOC=system: not)
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python; fi
fi

if [ "$MAX_RESTARTS" -gt 0 ]; then
    # The c10d rendezvous restarts every node together when a process on one of them fails
    # (the static one restarts only the failed node). Node ranks are then assigned by the
    # rendezvous; the global ranks stay 0..N-1.
    RENDEZVOUS=(--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$PORT"
                --rdzv-id="${RDZV_ID:-${SLURM_JOB_ID:-cvt_mm}}")
    # Node 0 (NODE_RANK said, or one node) hosts the rendezvous store and is reached at
    # MASTER_ADDR. Left to torch, each node compares MASTER_ADDR with its host name's
    # addresses (an address on another interface matches no node, each then waits for a
    # store nobody serves; a host name that does not resolve stops torchrun), and workers
    # look for rendezvous rank 0's store at its host name, not at MASTER_ADDR.
    if [ "$NNODES" = 1 ]; then NODE_RANK=${NODE_RANK:-0}; fi
    if [ "$NODE_RANK" = 0 ]; then
        RENDEZVOUS+=(--rdzv-conf=is_host=1)
        LOCAL_ADDR=${LOCAL_ADDR:-$MASTER_ADDR}
    elif [ -n "$NODE_RANK" ]; then
        RENDEZVOUS+=(--rdzv-conf=is_host=0)
    fi
    if [ -n "${LOCAL_ADDR:-}" ]; then RENDEZVOUS+=(--local-addr="$LOCAL_ADDR"); fi
    # A new store per attempt, served by its rank 0: the agents' shared one is namespaced by
    # a restart count that differs between nodes (cvt_mm.apis.launch.init_process_group).
    export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
else
    RENDEZVOUS=(--node_rank="${NODE_RANK:-0}" --master_addr="$MASTER_ADDR"
                --master_port="$PORT")
fi

# torchrun forwards these signals to the workers (sbatch --signal=USR1@90 sends SIGUSR1) and
# waits SHUTDOWN_TIMEOUT seconds for them; both are read from the environment, so a torchrun
# too old to know them ignores them. torchrun is this subshell's process once exec'd: its
# ranks learn its pid, and stop when it dies (cvt_mm.apis.launch.stop_with_launcher).
( export CVT_MM_LAUNCHER_PID=$BASHPID
  PET_SIGNALS_TO_HANDLE=${PET_SIGNALS_TO_HANDLE:-SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1} \
  TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${SHUTDOWN_TIMEOUT:-120} \
  PYTHONPATH="$ROOT:${PYTHONPATH:-}" \
  exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --nproc_per_node="$GPUS" \
    --max-restarts="$MAX_RESTARTS" \
    "${RENDEZVOUS[@]}" \
    "$ROOT/tools/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}" )
