#!/usr/bin/env bash
# Training samples/s of the recipe's step beside the plain eager loop, same network and batch, same run.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/benchmark.sh [--recipe FILE] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}] [--batch-size N] [--report FILE]"
  echo
fi
exec "${PYTHON}" -m skeleton.benchmark "$@"
