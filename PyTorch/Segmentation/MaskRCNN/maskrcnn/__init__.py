"""Mask R-CNN (ResNet-50-FPN) on COCO 2017: model, data, training, evaluation, detection, export."""

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parents[1]
# The 1-GPU COCO recipe: what train.py and the benchmark start from.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "maskrcnn_coco_1gpu.yaml"
