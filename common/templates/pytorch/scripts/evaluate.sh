#!/usr/bin/env bash
# Top-1 and loss of a training checkpoint on the validation split (the checkpoint carries its recipe).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/evaluate.sh --checkpoint PATH [--data-dir DIR] [--amp {bf16,fp16,fp32}] [--synthetic]"
  echo
fi
exec "${PYTHON}" -m skeleton.evaluate "$@"
