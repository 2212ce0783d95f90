#!/usr/bin/env bash
# Pull a pretrained checkpoint by name from checkpoints.yaml into the zoo cache ($ZOO_CACHE) and print
# its path (--convert-ngc OUT turns an NGC SSD300 file into this model's model.pt). --list shows the names.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m ssd.checkpoints "$@"
