"""RetinaNet (ResNeXt50-32x4d or ResNet-50 FPN, focal loss) for OpenImages-MLPerf and COCO detection."""

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parents[1]
# The MLPerf recipe on one node: what train.py, the benchmark and evaluation start from.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "retinanet_openimages_mlperf.yaml"
