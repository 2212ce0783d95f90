"""SSD300 v1.1 (ResNet-50 backbone) for COCO detection."""
