#!/usr/bin/env bash
# Export ONNX into a Triton model repository (unet3d_onnx, unet3d_python).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/export_triton.sh --checkpoint PATH | --pretrained NAME [--repository DIR] [--models onnx,python]"
  echo
fi
exec "${PYTHON}" -m unet3d.export "$@"
