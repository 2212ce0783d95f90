#!/usr/bin/env bash
# GPT: serve the repository with tritonserver and generate through tritonclient, or measure it under load (--concurrency 1,4 --requests N). Arguments go to gpt.deploy (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m gpt.deploy "$@"
