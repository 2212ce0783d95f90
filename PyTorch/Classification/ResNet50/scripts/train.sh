#!/usr/bin/env bash
# Train ResNet-50 v1.5: one process, or torchrun over NGPU GPUs and several nodes.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage: scripts/train.sh [--gpus N] [--nnodes N] [--node-rank R] [--rdzv-endpoint HOST:PORT]
                        [--recipe configs/X.yaml] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}]
                        [--resume {auto,PATH,none}] [--target-top1 PERCENT] [--data-dir DIR]
                        [--results-dir DIR] [any python -m resnet50.train flag ...]

--gpus N: processes (GPUs) per node, the same as the environment variable NGPU (default 1).
Environment: NGPU, NNODES, DATA_DIR, RESULTS_DIR, PYTHON.
With NGPU>1 or NNODES>1 the run is launched with torchrun (c10d rendezvous).
Examples:
  scripts/train.sh --recipe configs/resnet50_1gpu_90ep.yaml --data-dir /data/imagenet
  NGPU=8 scripts/train.sh --recipe configs/resnet50_8gpu_90ep.yaml --data-dir /data/imagenet --target-top1 75.9
  scripts/train.sh --gpus 8 --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500 --recipe configs/resnet50_8gpu_90ep.yaml
  scripts/train.sh --synthetic --epochs 1 --steps-per-epoch 50 --set train.compile=true
  scripts/train.sh --recipe configs/resnet50_1gpu_90ep.yaml --data-dir /data/imagenet --resume auto
USAGE
}

NGPU="${NGPU:-1}"
NNODES="${NNODES:-1}"
NODE_RANK="${NODE_RANK:-0}"
RDZV_ENDPOINT="${RDZV_ENDPOINT:-127.0.0.1:29500}"
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; echo; exec "${PYTHON}" -m resnet50.train --help ;;
    --gpus) NGPU="$2"; shift 2 ;;
    --nnodes) NNODES="$2"; shift 2 ;;
    --node-rank) NODE_RANK="$2"; shift 2 ;;
    --rdzv-endpoint) RDZV_ENDPOINT="$2"; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

if [[ "${NGPU}" -gt 1 || "${NNODES}" -gt 1 ]]; then
  exec "${PYTHON}" -m torch.distributed.run --nproc-per-node "${NGPU}" --nnodes "${NNODES}" \
    --node-rank "${NODE_RANK}" --rdzv-backend c10d --rdzv-endpoint "${RDZV_ENDPOINT}" \
    -m resnet50.train "${ARGS[@]}"
fi
exec "${PYTHON}" -m resnet50.train "${ARGS[@]}"
