#!/usr/bin/env bash
# Transformer: training tokens/s (ours next to Hugging Face MarianMTModel of the same dimensions) and beam-4 translation sentences/s (JSON). Arguments go to transformer.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m transformer.benchmark "$@"
