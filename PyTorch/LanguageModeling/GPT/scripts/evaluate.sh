#!/usr/bin/env bash
# GPT: validation log-perplexity of model.pt (or a checkpoint/ folder) on --data-dir. Arguments go to gpt.evaluate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m gpt.evaluate "$@"
