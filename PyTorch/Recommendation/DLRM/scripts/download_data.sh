#!/usr/bin/env bash
# Criteo data: checks and preprocesses the Criteo 1TB day files or Kaggle train.txt you downloaded (--raw-dir; Criteo's licence requires fetching them yourself) into binary shards in --data-dir (default $DATA_DIR); --synthetic writes a generated set in the same format. Arguments go to dlrm.download (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m dlrm.download "$@"
