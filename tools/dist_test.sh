#!/usr/bin/env bash
# Multi-GPU / multi-node evaluation on torchrun, as MMDetection's tools/dist_test.sh:
#   bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py options]
# NNODES, NODE_RANK, MASTER_ADDR, PORT and PYTHON as in tools/dist_train.sh.
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/tools/misc/cpu_malloc.sh"  # large freed blocks reused (CVT_MM_MALLOC=system: not)
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python; fi
fi

PYTHONPATH="$ROOT:${PYTHONPATH:-}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$ROOT/tools/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "${@:4}"
