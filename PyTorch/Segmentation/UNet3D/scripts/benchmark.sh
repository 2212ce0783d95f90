#!/usr/bin/env bash
# Training patches/s and evaluation volumes/s of our 3D U-Net next to MONAI's DynUNet, in one run.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/benchmark.sh [--recipe FILE] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}] [--models ours,monai]"
  echo "                             [--batch-size N] [--volume D H W] [--warmup N] [--iters N] [--output FILE]"
  echo "\"ours\" is the recipe (default configs/unet3d_kits19_1gpu.yaml); every lever is a recipe key (--set)."
  echo "Example: scripts/benchmark.sh --amp bf16 --set train.compile=reduce-overhead --set train.channels_last=true"
  echo
fi
exec "${PYTHON}" -m unet3d.benchmark "$@"
