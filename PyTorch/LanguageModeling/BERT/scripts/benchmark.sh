#!/usr/bin/env bash
# Phase-1 pretraining throughput of our BERT and of transformers.BertForPreTraining, same data, one
# process; prints sequences/s of both and their ratio, writes a JSON report.
#   scripts/benchmark.sh                       # bert-large, batch 64, seq 128, bf16, compiled on a GPU
#   scripts/benchmark.sh --tiny --device cpu   # smoke run
#   scripts/benchmark.sh --no-compile          # eager
# Every option: scripts/benchmark.sh --help
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# common/ on the path too, for machines where the zoo package is not installed
export PYTHONPATH="${MODEL_DIR}:${MODEL_DIR}/../../../common${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python}" -m bert.benchmark "$@"
