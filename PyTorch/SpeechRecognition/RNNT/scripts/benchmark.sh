#!/usr/bin/env bash
# RNN-T: training utterances/s of the recipe's step next to the plainest PyTorch RNN-T on the same batch (JSON). Arguments go to rnnt.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m rnnt.benchmark "$@"
