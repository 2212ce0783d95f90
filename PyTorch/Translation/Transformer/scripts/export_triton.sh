#!/usr/bin/env bash
# Transformer: ONNX encoder and decoder step, and a Triton model repository that runs beam search over them. Arguments go to transformer.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m transformer.export "$@"
