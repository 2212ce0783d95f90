#!/usr/bin/env bash
# SQuAD v1.1 exact match / F1 of a fine-tuned checkpoint on the dev set (fine-tuning: scripts/train.sh squad):
#   scripts/evaluate.sh --init-checkpoint results/squad/squad_model.pt --vocab data/bert/vocab/vocab.txt \
#       --data-dir data/squad --results-dir results/squad_eval        # DATA_DIR/dev-v1.1.json
#   scripts/evaluate.sh ... --predict-file my-dev.json --amp fp32
#   scripts/evaluate.sh --score data/squad/dev-v1.1.json predictions.json   # score a predictions file
# Every option: scripts/evaluate.sh --help (python -m bert.finetune_squad --do-predict)
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
if [[ "${1:-}" == "--score" ]]; then
  shift
  exec "${PYTHON:-python}" -m zoo.data.squad "$@"
fi
exec "${PYTHON:-python}" -m bert.finetune_squad --do-predict "$@"
