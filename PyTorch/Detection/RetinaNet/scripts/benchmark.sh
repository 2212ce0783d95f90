#!/usr/bin/env bash
# RetinaNet: train and inference images/s of ours (a recipe; --set) next to torchvision's RetinaNet with the same backbone and image size (AMP, eager), in the same run (JSON). Arguments go to retinanet.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m retinanet.benchmark "$@"
