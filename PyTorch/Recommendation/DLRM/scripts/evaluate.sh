#!/usr/bin/env bash
# DLRM: exact ROC AUC of a checkpoint over the whole validation split (torchrun for several processes). Arguments go to dlrm.evaluate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m dlrm.evaluate "$@"
