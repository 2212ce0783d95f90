#!/usr/bin/env bash
# Train DLRM / DLRM-DCNv2. NGPU (or --gpus N) > 1 launches torchrun on this node; multi-node: set NNODES,
# NODE_RANK and RDZV_ENDPOINT (host:port) on every node, or run under SLURM (srun; ranks from SLURM_*).
# Every other argument goes to dlrm.train (python -m dlrm.train --help lists them); --data-dir and
# --results-dir default to DATA_DIR and RESULTS_DIR.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
PY="${PYTHON:-python}"
NGPU="${NGPU:-1}"
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpus) NGPU="$2"; shift 2 ;;
    --gpus=*) NGPU="${1#--gpus=}"; shift ;;
    -h|--help)
      echo "usage: train.sh [--gpus N] [dlrm.train options]"
      echo "  --gpus N    processes (GPUs) on this node; default \$NGPU, else 1; N > 1 runs torchrun"
      echo "  env: NGPU, NNODES, NODE_RANK, RDZV_ENDPOINT, DATA_DIR, RESULTS_DIR"
      echo
      exec "$PY" -m dlrm.train --help ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
NNODES="${NNODES:-1}"
if [[ "$NGPU" -gt 1 || "$NNODES" -gt 1 ]]; then
  exec "$PY" -m torch.distributed.run --nproc_per_node "$NGPU" --nnodes "$NNODES" \
    --node_rank "${NODE_RANK:-0}" --rdzv_backend c10d --rdzv_endpoint "${RDZV_ENDPOINT:-127.0.0.1:29500}" \
    -m dlrm.train "${ARGS[@]}"
fi
exec "$PY" -m dlrm.train "${ARGS[@]}"
