#!/usr/bin/env bash
# Serve a Triton model repository with tritonserver on 127.0.0.1 and classify images via tritonclient.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/deploy_triton.sh [--repository DIR] [--model efficientnet_python] [--protocol http|grpc] [--concurrency 1,4,16 --requests N] IMAGE|DIR ..."
  echo
fi
exec "${PYTHON}" -m efficientnet.deploy "$@"
