#!/usr/bin/env bash
# OpenImages v6, the MLPerf subset (264 classes; real URLs of the OpenImages csv files and images,
# resumable, verified, converted to COCO-format json), or COCO 2017 (--dataset coco, through zoo.data.coco),
# into --data-dir (default $DATA_DIR). --synthetic writes the small digits detection set instead.
# Arguments go to retinanet.download (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m retinanet.download "$@"
