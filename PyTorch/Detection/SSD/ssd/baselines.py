"""What the benchmark compares SSD300 with: the same network as a user would write it with
torchvision's ``SSD`` class, and torchvision's own ``ssd300_vgg16``.

``torchvision_ssd_resnet50`` is SSD300 v1.1 from torchvision parts: ResNet-50 through ``layer3``
(first block at stride 1), the five extra blocks, ``SSDHead`` with 4/6/6/6/4/4 boxes per cell,
``DefaultBoxGenerator`` giving the same 8,732 default boxes, and torchvision's SSD loss (smooth-L1
on positives, cross-entropy with 3:1 hard negatives). Post-processing uses ours' settings (score
0.05, 200 candidates per class, NMS at 0.5, 200 detections). It has as many parameters as
:class:`ssd.model.SSD300` (tests/test_baselines.py checks both).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn as nn
import torchvision
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
from torchvision.models.detection.ssd import SSD, SSDHead

FEATURE_CHANNELS = [1024, 512, 512, 256, 256, 256]
BOXES_PER_LOCATION = [4, 6, 6, 6, 4, 4]
ASPECT_RATIOS = [[2], [2, 3], [2, 3], [2, 3], [2], [2]]
SCALES_PX = [21, 45, 99, 153, 207, 261, 315]
STEPS = [8, 16, 32, 64, 100, 300]


class ResNet50Features(nn.Module):
    """ResNet-50 to ``layer3`` (38x38 at 300x300) and five extra blocks: six feature maps."""

    out_channels = FEATURE_CHANNELS

    def __init__(self) -> None:
        super().__init__()
        resnet = torchvision.models.resnet50(weights=None)
        block = resnet.layer3[0]
        block.conv2.stride = (1, 1)
        block.downsample[0].stride = (1, 1)
        self.trunk = nn.Sequential(
            resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool, resnet.layer1, resnet.layer2, resnet.layer3
        )
        extras = []
        for i, mid in enumerate([256, 256, 128, 128, 128]):
            stride, padding = (2, 1) if i < 3 else (1, 0)
            extras.append(
                nn.Sequential(
                    nn.Conv2d(FEATURE_CHANNELS[i], mid, 1, bias=False),
                    nn.BatchNorm2d(mid),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(mid, FEATURE_CHANNELS[i + 1], 3, stride=stride, padding=padding, bias=False),
                    nn.BatchNorm2d(FEATURE_CHANNELS[i + 1]),
                    nn.ReLU(inplace=True),
                )
            )
        self.extras = nn.ModuleList(extras)

    def forward(self, x: torch.Tensor) -> OrderedDict:
        features = [self.trunk(x)]
        for block in self.extras:
            features.append(block(features[-1]))
        return OrderedDict((str(i), f) for i, f in enumerate(features))


def default_box_generator() -> DefaultBoxGenerator:
    """torchvision's generator set to SSD300 v1.1's default boxes (8,732 at 300x300)."""
    return DefaultBoxGenerator(ASPECT_RATIOS, scales=[s / 300 for s in SCALES_PX], steps=STEPS)


def torchvision_ssd_resnet50(num_classes: int = 81) -> SSD:
    """SSD300 v1.1 (ResNet-50) as torchvision's ``SSD`` class, untrained."""
    return SSD(
        ResNet50Features(),
        default_box_generator(),
        (300, 300),
        num_classes,
        head=SSDHead(FEATURE_CHANNELS, BOXES_PER_LOCATION, num_classes),
        score_thresh=0.05,
        nms_thresh=0.5,
        detections_per_img=200,
        topk_candidates=200,
        positive_fraction=0.25,  # three negatives per positive
    )


def torchvision_ssd300_vgg16(num_classes: int = 91) -> SSD:
    """torchvision's ``ssd300_vgg16`` (VGG-16 backbone, its own defaults), untrained."""
    from torchvision.models.detection import ssd300_vgg16

    return ssd300_vgg16(weights=None, weights_backbone=None, num_classes=num_classes)


BASELINES = {
    "torchvision-ssd": torchvision_ssd_resnet50,
    "ssd300_vgg16": torchvision_ssd300_vgg16,
}
