#!/usr/bin/env bash
# SavedModel + ONNX (tf2onnx) + python-backend models of a fine-tuned SQuAD model in a Triton model repository.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m bert_tf.export "$@"
