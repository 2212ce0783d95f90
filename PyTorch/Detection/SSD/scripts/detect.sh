#!/usr/bin/env bash
# SSD300: draw detections of a checkpoint on an image (PNG). Arguments go to ssd.detect (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m ssd.detect "$@"
