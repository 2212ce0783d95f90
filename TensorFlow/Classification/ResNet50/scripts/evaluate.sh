#!/usr/bin/env bash
# Top-1/top-5 of a checkpoint (run dir, checkpoint prefix or Keras .h5) on the validation TFRecords
# of --data-dir ($DATA_DIR); --amp {bf16,fp16,fp32}; --results-dir also writes eval.json.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# oneDNN kernels on every x86 CPU (TensorFlow turns them on for recent Intel ones only): ResNet-50's CPU
# training step ran 7x faster with them on an AMD EPYC (2026-11-27); no effect on GPUs.
export TF_ENABLE_ONEDNN_OPTS="${TF_ENABLE_ONEDNN_OPTS:-1}"
exec "${PYTHON:-python}" -m resnet50_tf.evaluate "$@"
