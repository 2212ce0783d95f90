"""SSD300 v1.1 (ResNet-50 backbone) for COCO detection."""

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parents[1]
# The 1-GPU COCO recipe: what train.py, the benchmark and the scaling mode start from.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "ssd300_coco_65ep.yaml"
