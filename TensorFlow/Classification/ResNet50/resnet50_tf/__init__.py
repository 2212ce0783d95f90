"""ResNet-50 v1.5 in TensorFlow 2 / Keras: model, input pipeline, training, evaluation, export."""

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD"]

# RGB mean and standard deviation on the 0..255 scale; the model takes normalised NHWC float images.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)
