#!/usr/bin/env bash
# GPT: continue --prompt with model.pt, greedy or sampled (--temperature, --top-k, --seed), with the KV cache. Arguments go to gpt.generate (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m gpt.generate "$@"
