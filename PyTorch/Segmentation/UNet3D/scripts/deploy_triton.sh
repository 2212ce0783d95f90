#!/usr/bin/env bash
# Serve the repository with tritonserver on 127.0.0.1 (or use --url) and segment held-out volumes through it.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/deploy_triton.sh --data-dir DIR [--repository DIR] [--model unet3d_python|unet3d_onnx] [--url HOST:PORT]"
  echo "                                 [--concurrency 1,4,16 --requests N]   (load mode: windows per second, latency)"
  echo
fi
exec "${PYTHON}" -m unet3d.deploy "$@"
