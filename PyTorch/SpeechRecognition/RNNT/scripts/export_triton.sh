#!/usr/bin/env bash
# RNN-T: ONNX encoder (audio in), prediction and joint networks, and a Triton repository whose python backend decodes greedily over them. Arguments go to rnnt.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m rnnt.export "$@"
