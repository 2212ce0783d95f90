#!/usr/bin/env bash
# Serve a Triton model repository with tritonserver and answer questions through tritonclient.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m bert_tf.deploy "$@"
