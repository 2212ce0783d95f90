#!/usr/bin/env bash
# Prepare the dataset in DATA_DIR (a real model downloads it here through zoo.io.download).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/download_data.sh --data-dir DIR"
  echo
fi
exec "${PYTHON}" -m skeleton.data "$@"
