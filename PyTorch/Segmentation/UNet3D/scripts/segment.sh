#!/usr/bin/env bash
# Segment a CT volume: a NIfTI in, a label NIfTI and a PNG of slices out.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/segment.sh --checkpoint PATH | --pretrained NAME IMAGE.nii.gz [--output LABELS.nii.gz] [--png FILE]"
  echo "                           [--amp {bf16,fp16,fp32}] [--device cpu|cuda]"
  echo
fi
exec "${PYTHON}" -m unet3d.segment "$@"
