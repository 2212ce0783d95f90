#!/usr/bin/env bash
# Train ResNet-50 v1.5 (MXNet Gluon).
#   scripts/train.sh [--gpus N] [train options]    one process drives N GPUs (kvstore device/nccl); NGPU=N is the same
#   scripts/train.sh --local-workers N [options]   a dist_sync job on this machine (scheduler + server + N workers)
#   DMLC_ROLE=... scripts/train.sh [options]       one role of a multi-node job (variables set by your launcher)
# Environment: NGPU (GPU count, default: the recipe's), DATA_DIR, RESULTS_DIR, RECIPE, NUM_SERVERS.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"

# DATA_DIR and RESULTS_DIR are the python parser's defaults; an explicit --gpus overrides NGPU.
args=()
[[ -n "${RECIPE:-}" ]] && args+=(--recipe "$RECIPE")
[[ -n "${NGPU:-}" ]] && args+=(--gpus "$NGPU")

if [[ "${1:-}" == "--local-workers" ]]; then
  [[ $# -ge 2 ]] || { echo "error: --local-workers needs a number" >&2; exit 2; }
  workers="$2"
  shift 2
  exec "$PY" -m resnet50_mx.launch --workers "$workers" --servers "${NUM_SERVERS:-1}" -- "${args[@]}" "$@"
fi
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  echo "usage:"
  sed -n '3,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo
fi
exec "$PY" -m resnet50_mx.train "${args[@]}" "$@"
