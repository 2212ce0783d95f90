#!/usr/bin/env bash
# COCO 2017 instance segmentation: resumable download from images.cocodataset.org, MD5 check, extraction
# into --data-dir (default $DATA_DIR)/{train2017,val2017,annotations}. --synthetic writes the small
# generated shapes set instead. Arguments go to maskrcnn.download (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m maskrcnn.download "$@"
