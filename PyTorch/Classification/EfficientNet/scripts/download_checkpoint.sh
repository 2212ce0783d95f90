#!/usr/bin/env bash
# This model's pretrained checkpoints (checkpoints.yaml beside scripts/), through zoo.checkpoints:
#   scripts/download_checkpoint.sh list                          name, format, size, accuracy, description
#   scripts/download_checkpoint.sh pull NAME [--cache-dir DIR]   download (resumed, verified), print the path
# Files are cached in --cache-dir, else $ZOO_CACHE, else ~/.cache/zoo/checkpoints.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${PYTHON:-python}" -m zoo.checkpoints --registry "${MODEL_DIR}/checkpoints.yaml" \
  --prog scripts/download_checkpoint.sh "$@"
