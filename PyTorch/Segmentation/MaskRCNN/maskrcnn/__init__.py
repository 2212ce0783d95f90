"""Mask R-CNN (ResNet-50-FPN) on COCO 2017: model, data, training, evaluation, detection, export."""
