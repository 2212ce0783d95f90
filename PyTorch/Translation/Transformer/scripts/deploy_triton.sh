#!/usr/bin/env bash
# Transformer: serve the repository with tritonserver and translate through tritonclient, or measure it
# under load (--concurrency 1,4,16 --requests N). Arguments go to transformer.deploy (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m transformer.deploy "$@"
