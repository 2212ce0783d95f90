#!/usr/bin/env bash
# SQuAD v1.1 exact match / F1 of a fine-tuned model on the dev set (fine-tuning: scripts/train.sh squad):
#   scripts/evaluate.sh --init-checkpoint results/squad --vocab data/bert/vocab/vocab.txt \
#       --data-dir data/squad --results-dir results/squad_eval        # DATA_DIR/dev-v1.1.json
#   scripts/evaluate.sh --score data/squad/dev-v1.1.json predictions.json   # score a predictions file
# The scorer is the official v1.1 metric (zoo.data.squad), the one the PyTorch BERT uses.
# Every option: scripts/evaluate.sh --help (python -m bert_tf.finetune_squad --do-predict)
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# oneDNN kernels on every x86 CPU (TensorFlow turns them on for recent Intel ones only): ResNet-50's CPU
# training step ran 7x faster with them on an AMD EPYC (2026-11-27); no effect on GPUs.
export TF_ENABLE_ONEDNN_OPTS="${TF_ENABLE_ONEDNN_OPTS:-1}"
if [[ "${1:-}" == "--score" ]]; then
  shift
  exec "${PYTHON:-python}" -m zoo.data.squad "$@"
fi
exec "${PYTHON:-python}" -m bert_tf.finetune_squad --do-predict "$@"
