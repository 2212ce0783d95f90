#!/usr/bin/env bash
# RNN-T: word error rate of model.pt on a prepared split (greedy decoding, jiwer). Arguments go to rnnt.evaluate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m rnnt.evaluate "$@"
