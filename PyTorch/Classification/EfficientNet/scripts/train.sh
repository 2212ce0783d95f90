#!/usr/bin/env bash
# Train EfficientNet: one process, or torchrun over NGPU GPUs and several nodes.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage: scripts/train.sh [--gpus N] [--nnodes N] [--node-rank R] [--rdzv-endpoint HOST:PORT]
                        [--recipe configs/X.yaml] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}]
                        [--resume {auto,PATH,none}] [--target-top1 PERCENT] [--data-dir DIR]
                        [--results-dir DIR] [any python -m efficientnet.train flag ...]

--gpus N: processes (GPUs) per node, the same as the environment variable NGPU (default 1).
Environment: NGPU, NNODES, DATA_DIR, RESULTS_DIR, PYTHON.
With NGPU>1 or NNODES>1 the run is launched with torchrun (c10d rendezvous).
Examples:
  scripts/train.sh --recipe configs/efficientnet_b0_8gpu.yaml --data-dir /data/imagenet
  NGPU=8 scripts/train.sh --recipe configs/efficientnet_b4_8gpu.yaml --data-dir /data/imagenet --target-top1 77.6
  scripts/train.sh --gpus 8 --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500 --recipe configs/efficientnet_b4_8gpu.yaml
  scripts/train.sh --synthetic --epochs 1 --steps-per-epoch 200   # logs steady-state throughput (steps 21-200)
  scripts/train.sh --recipe configs/efficientnet_b0_8gpu.yaml --data-dir /data/imagenet --resume auto
USAGE
}

ZOO_COMMON="$("${PYTHON}" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PYTHON} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# The launcher shared by the PyTorch models (--gpus, --nnodes, --node-rank, --rdzv-endpoint and their
# environment variables; torchrun when N > 1) sits in common/scripts, beside the installed zoo package.
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_torch.sh"
launch_torch efficientnet.train "$@"
