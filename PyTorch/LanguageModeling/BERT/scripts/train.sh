#!/usr/bin/env bash
# BERT pretraining under torchrun (one or several GPUs, one or several nodes).
#   NGPU=8 scripts/train.sh --recipe configs/pretrain_phase1_8gpu.yaml --data-dir data/bert/phase1 \
#       --results-dir results/phase1
#   NGPU=8 scripts/train.sh --recipe configs/pretrain_phase2_8gpu.yaml --data-dir data/bert/phase2 \
#       --results-dir results/phase2 --init-checkpoint results/phase1/model.pt
# Launcher options (the rest goes to python -m bert.pretrain):
#   --gpus N / NGPU=N          processes on this node (default: all visible GPUs, 1 on a CPU)
#   --nnodes N, --node-rank R  several nodes; --rdzv-endpoint HOST:PORT of node 0 (default 127.0.0.1:29500)
#   SLURM: srun one task per node, each running this script with --nnodes $SLURM_NNODES
#          --node-rank $SLURM_NODEID --rdzv-endpoint <first host>:29500 (see README).
# A run resumes from --results-dir/checkpoint.pt when one is there.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
gpus=${NGPU:-}
nnodes=1
node_rank=0
endpoint=127.0.0.1:29500
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help)
      sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      echo "usage: train.sh [--gpus N] [--nnodes N --node-rank R --rdzv-endpoint HOST:PORT] [pretrain options]"
      exec "${PYTHON:-python}" -m bert.pretrain --help ;;
    --gpus) gpus=$2; shift 2 ;;
    --nnodes) nnodes=$2; shift 2 ;;
    --node-rank) node_rank=$2; shift 2 ;;
    --rdzv-endpoint) endpoint=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ -z "$gpus" ]]; then
  gpus=$("${PYTHON:-python}" -c 'import torch; print(max(1, torch.cuda.device_count()))')
fi
if [[ "$gpus" == 1 && "$nnodes" == 1 ]]; then
  exec "${PYTHON:-python}" -m bert.pretrain "${args[@]}"
fi
exec "${PYTHON:-python}" -m torch.distributed.run --nproc_per_node "$gpus" --nnodes "$nnodes" \
  --node_rank "$node_rank" --rdzv_backend c10d --rdzv_endpoint "$endpoint" \
  -m bert.pretrain "${args[@]}"
