#!/usr/bin/env bash
# Mask R-CNN: draw boxes, masks and labels of a checkpoint's detections on images (PNG). Arguments go to maskrcnn.detect (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m maskrcnn.detect "$@"
