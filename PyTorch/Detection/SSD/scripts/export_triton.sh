#!/usr/bin/env bash
# SSD300: export the inference model (ONNX, TorchScript) into a Triton model repository. Arguments go to ssd.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m ssd.export "$@"
