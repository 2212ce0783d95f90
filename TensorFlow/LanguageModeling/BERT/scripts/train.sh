#!/usr/bin/env bash
# BERT pretraining (default) or SQuAD v1.1 fine-tuning, TensorFlow 2 / Keras. One process per node drives
# every GPU of the node (MirroredStrategy); several nodes (TF_CONFIG, or srun with one task per node) use
# MultiWorkerMirroredStrategy. --distribution horovod starts N processes under horovodrun (only where the
# container ships Horovod, as NVIDIA's TensorFlow container does).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# oneDNN kernels on every x86 CPU (TensorFlow turns them on for recent Intel ones only): ResNet-50's CPU
# training step ran 7x faster with them on an AMD EPYC (2026-11-27); no effect on GPUs.
export TF_ENABLE_ONEDNN_OPTS="${TF_ENABLE_ONEDNN_OPTS:-1}"
PY="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
usage: scripts/train.sh [pretrain|squad] [--gpus N] [options of the python entry point, below]

  pretrain (default)  python -m bert_tf.pretrain: --recipe, --set, --amp {bf16,fp16,fp32}, --resume
                      {auto,PATH,none}, --target-mlm-accuracy FRACTION (MLPerf's unit, 0.720), --init-checkpoint
  squad               python -m bert_tf.finetune_squad --do-train --do-predict: --data-dir holds
                      train-v1.1.json and dev-v1.1.json; --vocab, --init-checkpoint, --target-f1 PERCENT (90.5)
  --gpus N            GPUs of this node (default: $NGPU, else every visible GPU): one process drives them all
                      (MirroredStrategy); with --distribution horovod, N processes under horovodrun
Environment: NGPU (the same as --gpus), DATA_DIR (--data-dir), RESULTS_DIR (--results-dir), TF_CONFIG
(several nodes), PYTHON.
Examples:
  scripts/train.sh --gpus 8 --recipe configs/pretrain_phase1_8gpu.yaml --data-dir data/bert/phase1 --results-dir results/phase1
  scripts/train.sh --gpus 8 --recipe configs/pretrain_phase2_8gpu.yaml --data-dir data/bert/phase2 \
      --results-dir results/phase2 --init-checkpoint results/phase1/model.npz --target-mlm-accuracy 0.720
  scripts/train.sh squad --recipe configs/squad_1gpu.yaml --data-dir data/squad --vocab data/bert/vocab/vocab.txt \
      --init-checkpoint results/phase2 --results-dir results/squad --target-f1 90.5

USAGE
}

module=bert_tf.pretrain
extra=()
case "${1:-}" in
  pretrain) shift ;;
  squad) module=bert_tf.finetune_squad; extra=(--do-train --do-predict); shift ;;
esac
launch_tf_module_help() {
  echo "=== pretrain: python -m bert_tf.pretrain ==="
  "$PY" -m bert_tf.pretrain --help
  echo
  echo "=== squad: python -m bert_tf.finetune_squad ==="
  "$PY" -m bert_tf.finetune_squad --help
}
ZOO_COMMON="$("$PY" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PY} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# The launcher sits in common/scripts, beside the installed zoo package.
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_tf.sh"
launch_tf "$module" "${extra[@]}" "$@"
