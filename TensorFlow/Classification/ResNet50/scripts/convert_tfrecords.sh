#!/usr/bin/env bash
# An ImageNet-style folder (train/<class>/*, val/<class>/*) -> TFRecord shards + dataset.json in
# --data-dir (default $DATA_DIR), the folder train.sh --data-dir reads:
#   scripts/convert_tfrecords.sh --src /data/imagenet-folders --data-dir /data/imagenet
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m resnet50_tf.convert_tfrecords "$@"
