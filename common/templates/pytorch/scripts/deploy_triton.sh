#!/usr/bin/env bash
# Serve the repository with tritonserver (or use --url) and score the validation split through it.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/deploy_triton.sh [--repository DIR | --url HOST:PORT] [--model skeleton_python] [--data-dir DIR | --synthetic]"
  echo
fi
exec "${PYTHON}" -m skeleton.deploy "$@"
