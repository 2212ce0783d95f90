#!/usr/bin/env bash
# Mean Dice of a checkpoint on the held-out volumes (sliding window, Gaussian blending).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/evaluate.sh --checkpoint PATH | --pretrained NAME [--data-dir DIR | --synthetic]"
  echo "                            [--amp {bf16,fp16,fp32}] [--results-dir DIR] [--recipe FILE] [--set KEY=VALUE ...]"
  echo "Prints the mean Dice of kidney and tumour and writes RESULTS_DIR/eval.json."
  echo
fi
exec "${PYTHON}" -m unet3d.evaluate "$@"
