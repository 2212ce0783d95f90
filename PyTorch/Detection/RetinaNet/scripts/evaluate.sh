#!/usr/bin/env bash
# RetinaNet: COCO mAP of a checkpoint. Arguments go to retinanet.evaluate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m retinanet.evaluate "$@"
