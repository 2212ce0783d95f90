#!/usr/bin/env bash
# Export TorchScript + ONNX into a Triton model repository (efficientnet_libtorch, efficientnet_onnx, efficientnet_python).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/export_triton.sh --checkpoint PATH | --pretrained NAME [--repository DIR] [flags]"
  echo
fi
exec "${PYTHON}" -m efficientnet.export "$@"
