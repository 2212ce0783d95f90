#!/usr/bin/env bash
# Train the model: one process, or torchrun over NGPU GPUs and several nodes (common/scripts/launch_torch.sh).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage: scripts/train.sh [--gpus N] [--nnodes N] [--node-rank R] [--rdzv-endpoint HOST:PORT]
                        [--recipe configs/X.yaml] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}]
                        [--resume {auto,PATH,none}] [--target-top1 PERCENT] [--data-dir DIR]
                        [--results-dir DIR] [any python -m skeleton.train flag ...]
Examples:
  scripts/train.sh --data-dir data/skeleton --results-dir results/skeleton
  scripts/train.sh --gpus 2 --data-dir data/skeleton --results-dir results/skeleton2 --set run.batch_per_gpu=32
USAGE
}

ZOO_COMMON="$("${PYTHON}" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PYTHON} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_torch.sh"
launch_torch skeleton.train "$@"
