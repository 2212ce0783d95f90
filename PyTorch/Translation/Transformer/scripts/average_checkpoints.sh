#!/usr/bin/env bash
# Transformer: average the weights of several checkpoints into one model.pt. Arguments go to transformer.average (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m transformer.average "$@"
