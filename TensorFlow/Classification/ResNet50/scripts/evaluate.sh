#!/usr/bin/env bash
# Top-1/top-5 of a checkpoint (run dir, checkpoint prefix or Keras .h5) on the validation TFRecords
# of --data-dir ($DATA_DIR); --amp {bf16,fp16,fp32}; --results-dir also writes eval.json.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m resnet50_tf.evaluate "$@"
