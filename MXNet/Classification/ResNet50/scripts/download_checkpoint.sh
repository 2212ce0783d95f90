#!/usr/bin/env bash
# Pull a pretrained checkpoint by name from checkpoints.yaml (--list shows them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m resnet50_mx.checkpoint "$@"
