#!/usr/bin/env bash
# RetinaNet: draw detections of a checkpoint on an image (PNG). Arguments go to retinanet.detect (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m retinanet.detect "$@"
