#!/usr/bin/env bash
# Write a Triton model repository (onnxruntime and python backends) from a training checkpoint.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/export_triton.sh --checkpoint PATH [--repository DIR] [--force]"
  echo
fi
exec "${PYTHON}" -m skeleton.export "$@"
