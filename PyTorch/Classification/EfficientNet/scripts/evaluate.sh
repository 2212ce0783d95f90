#!/usr/bin/env bash
# Top-1 / top-5 of a checkpoint (or a registry checkpoint) on DATA_DIR/val.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/evaluate.sh --checkpoint PATH | --pretrained NAME [--data-dir DIR] [--amp {bf16,fp16,fp32}]"
  echo "                            [--results-dir DIR] [flags]   (prints top-1/top-5, writes RESULTS_DIR/eval.json)"
  echo
fi
exec "${PYTHON}" -m efficientnet.evaluate "$@"
