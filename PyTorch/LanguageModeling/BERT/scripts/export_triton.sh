#!/usr/bin/env bash
# Export a fine-tuned SQuAD model to ONNX (dynamic batch and sequence) into a Triton model repository
# (onnxruntime backend + python backend).
#   scripts/export_triton.sh --checkpoint results/squad/squad_model.pt --vocab data/bert/vocab/vocab.txt \
#       --model-repository results/triton_repository
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python}" -m bert.export "$@"
