#!/usr/bin/env bash
# Get KiTS19 (or make organ-like volumes) and prepare the npy folder that train.sh and evaluate.sh read.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<'USAGE'
Usage:
  scripts/download_data.sh kits19 --raw-dir DIR --data-dir DIR [--cases N]
        download KiTS19's 210 cases (imaging and segmentation NIfTI, resumed) into DIR/case_XXXXX/, then
        resample to 1.6x1.2x1.2 mm, clip to [-79, 304] HU, normalise and store as npy in --data-dir
        (MLPerf's 168 training / 42 evaluation cases, listed in --data-dir/dataset.json)
  scripts/download_data.sh prepare --raw-dir DIR --data-dir DIR       prepare case folders you already have
  scripts/download_data.sh synthetic --raw-dir DIR --data-dir DIR [--cases N] [--min-shape 32]
        organ-like volumes written as NIfTI, prepared the same way (no download)
  train.sh --synthetic needs no data at all.
--data-dir defaults to nothing: give it (it is the folder train.sh then reads as --data-dir / $DATA_DIR).
USAGE
  exit 0
fi
exec "${PYTHON}" -m unet3d.download "$@"
