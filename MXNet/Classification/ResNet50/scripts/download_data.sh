#!/usr/bin/env bash
# Prepare ImageNet (or any image folder, or the digits demo set) as RecordIO: see --help.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m resnet50_mx.prepare_data "$@"
