#!/usr/bin/env bash
# Pull a pretrained BERT checkpoint by name from checkpoints.yaml (verified, resumable, cached).
#   scripts/download_checkpoint.sh --list
#   scripts/download_checkpoint.sh hf-bert-large-uncased [--cache-dir DIR]
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python}" -m bert.checkpoints "$@"
