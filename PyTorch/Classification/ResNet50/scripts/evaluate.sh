#!/usr/bin/env bash
# Top-1 / top-5 of a checkpoint (or a registry checkpoint) on DATA_DIR/val.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/evaluate.sh --checkpoint PATH | --pretrained NAME [--data-dir DIR] [flags]"
  echo
fi
exec "${PYTHON}" -m resnet50.evaluate "$@"
