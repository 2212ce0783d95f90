#!/usr/bin/env bash
# An ImageNet-style folder (train/<class>/*, val/<class>/*) -> TFRecord shards + dataset.json.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m resnet50_tf.convert_tfrecords "$@"
