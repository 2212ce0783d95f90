#!/usr/bin/env bash
# RetinaNet: serve the repository with tritonserver and detect through tritonclient. Arguments go to retinanet.deploy (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m retinanet.deploy "$@"
