#!/usr/bin/env bash
# GPT: C4 en (the MLPerf split; resumable, verified download), a byte-level BPE trained with tokenizers, memory-mapped token shards into --data-dir (default $DATA_DIR); --corpus pydoc (or --synthetic) prepares the English of Python's documentation instead, with no download. Arguments go to gpt.download (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m gpt.download "$@"
