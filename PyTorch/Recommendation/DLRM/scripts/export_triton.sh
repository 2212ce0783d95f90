#!/usr/bin/env bash
# DLRM: export a checkpoint's single-device model to ONNX in a Triton model repository. Arguments go to dlrm.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m dlrm.export "$@"
