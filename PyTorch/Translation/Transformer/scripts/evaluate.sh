#!/usr/bin/env bash
# Transformer: translate a test set (or --input FILE) and score detokenised BLEU with sacrebleu. Arguments go to transformer.evaluate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m transformer.evaluate "$@"
