#!/usr/bin/env bash
# Mask R-CNN: COCO box and mask mAP@[.5:.95] of a checkpoint (pycocotools). Arguments go to maskrcnn.evaluate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m maskrcnn.evaluate "$@"
