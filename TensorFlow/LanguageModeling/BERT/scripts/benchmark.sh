#!/usr/bin/env bash
# Phase-1 pretraining throughput (seq/s): ours (configs recipe, bert_tf.pretrain's step) against
# keras_hub's BertMaskedLM, same sizes, same run; --amp {bf16,fp16,fp32}; --output FILE writes the JSON report.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python}" -m bert_tf.benchmark "$@"
