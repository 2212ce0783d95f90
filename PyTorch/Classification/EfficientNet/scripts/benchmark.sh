#!/usr/bin/env bash
# Training and inference throughput (and batch-1 latency) of our EfficientNet next to timm's, compiled.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/benchmark.sh [--mode train|inference|both] [--models timm-eager,timm-compile,ours,loader]"
  echo "                             [--recipe FILE] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}] [--batch-size N]"
  echo "                             [--data-dir DIR [--make-jpegs N]] [--output FILE]"
  echo "       scripts/benchmark.sh --gpus 1,2,4 [--recipe FILE] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}]"
  echo "                             [--batch-size N] [--window-seconds S] [--windows N] [--warmup N] [--output FILE]"
  echo "\"ours\" is the recipe (default configs/efficientnet_b0_8gpu.yaml); every lever is a recipe key (--set)."
  echo "--gpus: the scaling mode (zoo.scaling): the recipe's training step on synthetic batches of run.batch_per_gpu,"
  echo "launched like train.sh once per GPU count; steady-state windows of at least --window-seconds (default 20),"
  echo "replicas compared after the timed steps, scaling against 1 GPU of the same call (benchmark.sh --gpus 1 --help)."
  echo "Examples:"
  echo "  scripts/benchmark.sh --mode train --models timm-compile,ours --output results/bench_train.json"
  echo "  scripts/benchmark.sh --mode train --models ours --set train.compile=default --set train.ema_decay=null"
  echo "  scripts/benchmark.sh --mode inference --amp fp16 --models timm-eager,timm-compile,ours"
  echo "  scripts/benchmark.sh --mode train --data-dir /tmp/jpegs --make-jpegs 12800 --models ours,loader --set data.backend=gpu-decode"
  echo "  scripts/benchmark.sh --gpus 1,2,4 --recipe configs/efficientnet_b0_8gpu.yaml --windows 2 --warmup 30"
  echo
fi
exec "${PYTHON}" -m efficientnet.benchmark "$@"
