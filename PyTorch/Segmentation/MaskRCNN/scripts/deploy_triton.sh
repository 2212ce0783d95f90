#!/usr/bin/env bash
# Mask R-CNN: serve the repository with tritonserver and segment images through tritonclient, or measure it
# under load (--concurrency 1,4,16 --requests N). Arguments go to maskrcnn.deploy (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m maskrcnn.deploy "$@"
