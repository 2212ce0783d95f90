#!/usr/bin/env bash
# Training and inference throughput/latency on synthetic data; writes a zoo.bench JSON report.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m resnet50_mx.benchmark "$@"
