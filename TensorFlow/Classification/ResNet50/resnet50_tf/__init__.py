"""ResNet-50 v1.5 in TensorFlow 2 / Keras: model, input pipeline, training, evaluation, export."""

from pathlib import Path

__all__ = ["DEFAULT_RECIPE", "IMAGENET_MEAN", "IMAGENET_STD", "MODEL_DIR"]

MODEL_DIR = Path(__file__).resolve().parents[1]
# What train.py, evaluate.py and the benchmark read when no --recipe is given.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "resnet50_1gpu_90ep.yaml"

# RGB mean and standard deviation on the 0..255 scale; the model takes normalised NHWC float images.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)
