"""EfficientNet-B0/B4 and EfficientNet-WideSE for image classification: model, data, training,
evaluation, export, serving."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
# The recipe train.py and benchmark.py read when --recipe is not given.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "efficientnet_b0_8gpu.yaml"
