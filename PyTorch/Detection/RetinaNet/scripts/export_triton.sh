#!/usr/bin/env bash
# RetinaNet: export the inference model (ONNX, dynamic image size; decoding inside the graph, NMS beside it) into a Triton model repository. Arguments go to retinanet.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m retinanet.export "$@"
