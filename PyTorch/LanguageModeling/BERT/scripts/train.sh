#!/usr/bin/env bash
# BERT pretraining, or SQuAD v1.1 fine-tuning, under torchrun (one or several GPUs and nodes).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage: scripts/train.sh [pretrain|squad] [--gpus N] [--nnodes N] [--node-rank R] [--rdzv-endpoint HOST:PORT]
                        [--recipe configs/X.yaml] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}]
                        [--data-dir DIR] [--results-dir DIR] [python options ...]

  pretrain (default)  python -m bert.pretrain: --resume {auto,PATH,none}, --target-mlm-accuracy FRACTION
                      (MLPerf's unit, e.g. 0.720), --init-checkpoint (phase 1 -> 2), ...
  squad               python -m bert.finetune_squad --do-train --do-predict: --data-dir holds
                      train-v1.1.json and dev-v1.1.json; --vocab, --init-checkpoint, --target-f1 PERCENT (90.5)

--gpus N: processes (GPUs) per node, the same as the environment variable NGPU (default: every visible
GPU, 1 on a CPU). --nnodes N, --node-rank R, --rdzv-endpoint HOST:PORT of node 0 (default
127.0.0.1:29500): several nodes; under SLURM run one task per node with --nnodes $SLURM_NNODES
--node-rank $SLURM_NODEID (see README). With N > 1 or several nodes the run starts under torchrun.
Environment: NGPU, NNODES, NODE_RANK, RDZV_ENDPOINT (the defaults of the flags), DATA_DIR, RESULTS_DIR, PYTHON.
Examples:
  NGPU=8 scripts/train.sh --recipe configs/pretrain_phase1_8gpu.yaml --data-dir data/bert/phase1 --results-dir results/phase1
  NGPU=8 scripts/train.sh --recipe configs/pretrain_phase2_8gpu.yaml --data-dir data/bert/phase2 --results-dir results/phase2 \
      --init-checkpoint results/phase1/model.pt --target-mlm-accuracy 0.720
  scripts/train.sh --recipe configs/pretrain_phase1_1gpu.yaml --data-dir data/bert/phase1 --results-dir results/phase1 --resume auto
  NGPU=8 scripts/train.sh squad --recipe configs/squad_8gpu.yaml --data-dir data/squad --vocab data/bert/vocab/vocab.txt \
      --init-checkpoint results/phase2/model.pt --results-dir results/squad --target-f1 90.5
USAGE
}

module=bert.pretrain
extra=()
case "${1:-}" in
  pretrain) shift ;;
  squad) module=bert.finetune_squad; extra=(--do-train --do-predict); shift ;;
esac
for arg in "$@"; do
  if [[ "$arg" == -h || "$arg" == --help ]]; then
    usage
    echo
    echo "=== pretrain: python -m bert.pretrain ==="
    "${PYTHON}" -m bert.pretrain --help
    echo
    echo "=== squad: python -m bert.finetune_squad ==="
    exec "${PYTHON}" -m bert.finetune_squad --help
  fi
done
ZOO_COMMON="$("${PYTHON}" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PYTHON} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# The launcher shared by the PyTorch models (--gpus, --nnodes, --node-rank, --rdzv-endpoint and their
# environment variables; torchrun when N > 1) sits in common/scripts, beside the installed zoo package.
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_torch.sh"
LAUNCH_TORCH_DEFAULT_GPUS=visible launch_torch "$module" "${extra[@]}" "$@"
