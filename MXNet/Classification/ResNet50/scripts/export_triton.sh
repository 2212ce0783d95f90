#!/usr/bin/env bash
# Export a checkpoint to ONNX and write a Triton model repository (onnxruntime_onnx + python).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m resnet50_mx.export "$@"
