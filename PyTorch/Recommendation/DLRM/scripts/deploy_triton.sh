#!/usr/bin/env bash
# DLRM: serve the repository with tritonserver and score validation rows through tritonclient, or measure
# it under load (--concurrency 1,4,16 --requests N). Arguments go to dlrm.deploy (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m dlrm.deploy "$@"
