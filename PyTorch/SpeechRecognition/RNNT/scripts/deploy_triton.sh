#!/usr/bin/env bash
# RNN-T: serve the repository with tritonserver and transcribe audio files through tritonclient, or measure it under load (--concurrency). Arguments go to rnnt.deploy (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m rnnt.deploy "$@"
