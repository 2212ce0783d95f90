#!/usr/bin/env bash
# Training and inference throughput (and batch-1 latency) of our ResNet-50 next to torchvision's.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/benchmark.sh [--mode train|inference|both] [--variants a,b|all] [--amp {bf16,fp16,fp32}] [--batch-size N]"
  echo "                             [--data-dir DIR [--make-jpegs N]] [--gpus 1,2,4] [--output FILE]"
  echo "--amp sets every variant's precision (default: each variant's own); --output writes the JSON report."
  echo "Examples:"
  echo "  scripts/benchmark.sh --mode train --variants tv-compile,ours-cudagraphs --output results/bench_train.json"
  echo "  scripts/benchmark.sh --mode inference --variants tv-compile,ours-fp16-cudagraphs"
  echo "  scripts/benchmark.sh --mode train --data-dir /tmp/jpegs --make-jpegs 12800 --variants ours-bf16,ours-jpeg,loader-gpu-decode"
  echo "  scripts/benchmark.sh --mode train --gpus 1,2,4 --variants tv-compile,ours-bf16   # DDP scaling, one torchrun each"
  echo
fi
exec "${PYTHON}" -m resnet50.benchmark "$@"
