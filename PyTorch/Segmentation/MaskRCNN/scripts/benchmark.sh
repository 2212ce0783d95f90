#!/usr/bin/env bash
# Mask R-CNN: training and inference images/s, ours next to torchvision maskrcnn_resnet50_fpn (JSON report with --output); --gpus 1,2,4: scaling of the recipe's training step over GPU counts (zoo.scaling). Arguments go to maskrcnn.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m maskrcnn.benchmark "$@"
