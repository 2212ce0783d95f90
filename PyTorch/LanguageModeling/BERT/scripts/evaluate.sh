#!/usr/bin/env bash
# SQuAD v1.1 exact match / F1 of a fine-tuned checkpoint, or fine-tune first:
#   scripts/evaluate.sh --init-checkpoint results/squad/squad_model.pt --vocab data/bert/vocab/vocab.txt \
#       --predict-file data/squad/dev-v1.1.json
#   scripts/evaluate.sh --do-train --train-file data/squad/train-v1.1.json --init-checkpoint results/phase2/model.pt ...
#   scripts/evaluate.sh --score data/squad/dev-v1.1.json predictions.json   # score a predictions file
# Every option: scripts/evaluate.sh --help
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
if [[ "${1:-}" == "--score" ]]; then
  shift
  exec "${PYTHON:-python}" -m bert.squad "$@"
fi
case " $* " in
  *" --do-train "*|*" --do-predict "*|*" -h "*|*" --help "*) exec "${PYTHON:-python}" -m bert.finetune_squad "$@" ;;
  *) exec "${PYTHON:-python}" -m bert.finetune_squad --do-predict "$@" ;;
esac
