#!/usr/bin/env bash
# Top-1/top-5 of a checkpoint on val.rec.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m resnet50_mx.evaluate "$@"
