#!/usr/bin/env bash
# Mask R-CNN: export ONNX (any image size) into a Triton model repository. Arguments go to maskrcnn.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m maskrcnn.export "$@"
