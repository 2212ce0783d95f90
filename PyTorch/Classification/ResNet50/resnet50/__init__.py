"""ResNet-50 v1.5 for image classification: model, data, training, evaluation, export, serving."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
# The recipe train.py and benchmark.py read when --recipe is not given.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "resnet50_1gpu_90ep.yaml"
