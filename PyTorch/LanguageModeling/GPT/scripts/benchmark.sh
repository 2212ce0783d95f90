#!/usr/bin/env bash
# GPT: training tokens/s per GPU and MFU of the recipe's step next to Hugging Face LlamaForCausalLM / GPT2LMHeadModel of the same shape (FSDP2 + compile), on the same sequence length and batch; --gpus 1,2,4 launches each count (JSON and a table). Arguments go to gpt.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m gpt.benchmark "$@"
