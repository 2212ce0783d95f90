#!/usr/bin/env bash
# GPT: the Triton model repository (python backend, KV-cache generation; --repository) and/or the Hugging Face format (--hf-dir: LlamaForCausalLM / GPT2LMHeadModel safetensors). Arguments go to gpt.export (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m gpt.export "$@"
