#!/usr/bin/env bash
# Serve the Triton repository with tritonserver and classify validation images over HTTP.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m resnet50_mx.deploy "$@"
