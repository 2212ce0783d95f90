"""ResNet-50 v1.5 for image classification: model, data, training, evaluation, export, serving."""

from resnet50.model import Bottleneck, ResNet, resnet50

__all__ = ["Bottleneck", "ResNet", "resnet50"]
