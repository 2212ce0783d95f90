#!/usr/bin/env bash
# ImageNet (tarballs you downloaded) or the small digits set -> TFRecords in --data-dir ($DATA_DIR),
# the folder train.sh --data-dir reads. --help for options.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m resnet50_tf.prepare_data "$@"
