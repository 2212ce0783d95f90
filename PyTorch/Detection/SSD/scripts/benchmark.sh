#!/usr/bin/env bash
# SSD300: train and inference images/s of ours (a recipe; --set, --variant) next to the same network in torchvision's SSD class and ssd300_vgg16 (JSON); --gpus 1,2,4: scaling of the recipe's training step over GPU counts (zoo.scaling). Arguments go to ssd.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m ssd.benchmark "$@"
