#!/usr/bin/env bash
# Train ResNet-50 v1.5 (MXNet Gluon).
#   scripts/train.sh [train options]              one process; NGPU=8 or --gpus 0,1,.. uses kvstore device/nccl
#   scripts/train.sh --local-workers N [options]  a dist_sync job on this machine (scheduler + server + N workers)
#   DMLC_ROLE=... scripts/train.sh [options]      one role of a multi-node job (variables set by your launcher)
# Environment: NGPU (GPU count, default: the recipe's), DATA_DIR, RESULTS_DIR, RECIPE.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"

args=()
[[ -n "${RECIPE:-}" ]] && args+=(--recipe "$RECIPE")
[[ -n "${NGPU:-}" ]] && args+=(--gpus "$NGPU")
[[ -n "${DATA_DIR:-}" ]] && args+=(--data-dir "$DATA_DIR")
[[ -n "${RESULTS_DIR:-}" ]] && args+=(--results-dir "$RESULTS_DIR")

if [[ "${1:-}" == "--local-workers" ]]; then
  [[ $# -ge 2 ]] || { echo "train.sh: --local-workers needs a number" >&2; exit 2; }
  workers="$2"
  shift 2
  exec "$PY" -m resnet50_mx.launch --workers "$workers" --servers "${NUM_SERVERS:-1}" -- "${args[@]}" "$@"
fi
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo
fi
exec "$PY" -m resnet50_mx.train "${args[@]}" "$@"
