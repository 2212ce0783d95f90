"""RetinaNet: a ResNet / ResNeXt trunk with frozen BatchNorm, an FPN over C3-C5 with P6 and P7, and
two heads of four 3x3 convolutions (classes and box offsets) shared by the five levels.

The module names are torchvision's (``backbone.body``, ``backbone.fpn``, ``head.classification_head``,
``head.regression_head``), so a ``retinanet_resnet50_fpn`` (``version: 1``) or
``retinanet_resnet50_fpn_v2`` (``version: 2``: P6 from C5, GroupNorm in the heads) state dict loads
as it is and gives the same detections. The forward takes images already normalised with the
ImageNet mean and std, all of one size, and returns the heads' outputs over every anchor:
``logits (B, A, K)`` and ``deltas (B, A, 4)``.
"""

from __future__ import annotations

import functools

import torch
import torchvision
from torch import nn
from zoo.errors import UserError

from retinanet.boxes import anchors_per_level, candidates, select
from retinanet.settings import model_settings

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class RetinaNet(nn.Module):
    """RetinaNet over ``num_classes`` object classes (no background class: a sigmoid per class)."""

    def __init__(self, num_classes: int, settings: dict | None = None) -> None:
        super().__init__()
        from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
        from torchvision.models.detection.retinanet import RetinaNetHead
        from torchvision.ops import FrozenBatchNorm2d
        from torchvision.ops.feature_pyramid_network import LastLevelP6P7

        s = model_settings(settings)
        self.settings, self.num_classes = s, num_classes
        norm_layer = FrozenBatchNorm2d if s["frozen_bn"] else nn.BatchNorm2d
        trunk = getattr(torchvision.models, s["backbone"])(weights=None, norm_layer=norm_layer)
        c5 = trunk.inplanes  # 2048 for ResNet-50 / ResNeXt-50, 512 for ResNet-18/34
        extra = LastLevelP6P7(c5, s["fpn_channels"]) if s["version"] == 2 else LastLevelP6P7(256, 256)
        if s["version"] == 1 and s["fpn_channels"] != 256:
            extra = LastLevelP6P7(s["fpn_channels"], s["fpn_channels"])
        self.backbone = _resnet_fpn_extractor(
            trunk, s["trainable_layers"], returned_layers=[2, 3, 4], extra_blocks=extra,
            norm_layer=None,
        )  # fmt: skip
        # _resnet_fpn_extractor builds a 256-channel FPN; a smaller one is built in its place.
        if s["fpn_channels"] != 256:
            from torchvision.ops.feature_pyramid_network import FeaturePyramidNetwork

            in_channels = [c5 // 4, c5 // 2, c5]
            self.backbone.fpn = FeaturePyramidNetwork(in_channels, s["fpn_channels"], extra_blocks=extra)
            self.backbone.out_channels = s["fpn_channels"]
        norm = functools.partial(nn.GroupNorm, 32) if s["version"] == 2 else None
        self.head = RetinaNetHead(self.backbone.out_channels, 9, num_classes, norm_layer=norm)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = list(self.backbone(images).values())
        out = self.head(features)
        return out["cls_logits"], out["bbox_regression"]

    def feature_sizes(self, image_hw) -> list[tuple[int, int]]:
        """(H, W) of P3..P7 for an ``image_hw`` input (strides 8..128, rounding as the convolutions do)."""
        h, w = image_hw
        sizes = []
        for level in range(3, 8):
            # conv1 /2, maxpool /2, then a stride-2 3x3 (padding 1) per stage: ceil each time.
            h, w = (h + 1) // 2, (w + 1) // 2
            if level == 3:
                h, w = (h + 1) // 2, (w + 1) // 2
                h, w = (h + 1) // 2, (w + 1) // 2
            sizes.append((h, w))
        return sizes

    def anchors(self, image_hw, device=None) -> list[torch.Tensor]:
        """Each level's anchors for an ``image_hw`` input (:func:`retinanet.boxes.anchors_per_level`)."""
        return anchors_per_level(
            image_hw, self.feature_sizes(image_hw), self.settings["anchor_sizes"], device
        )


class RetinaNetCandidates(nn.Module):
    """The inference graph: images -> the heads -> each image's best candidates per level, decoded
    (:func:`retinanet.boxes.candidates`); class-wise NMS is left to :func:`retinanet.boxes.select`
    (beside the graph). Any image size: the anchors are made from the feature maps' shapes."""

    def __init__(self, model: RetinaNet) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor):
        features = list(self.model.backbone(images).values())
        out = self.model.head(features)
        image_hw = images.shape[-2:]
        hws = [f.shape[-2:] for f in features]
        anchors = anchors_per_level(image_hw, hws, self.model.settings["anchor_sizes"], images.device)
        s = self.model.settings
        return candidates(
            out["cls_logits"], out["bbox_regression"], anchors, image_hw,
            score_threshold=s["score_threshold"], per_level=s["candidates_per_level"],
        )  # fmt: skip


def detect(model: RetinaNet, images: torch.Tensor, *, amp_dtype=None) -> list[tuple]:
    """Each image's (boxes xyxy in input pixels, scores, labels 0..K-1), best first."""
    s = model.settings
    with torch.autocast(images.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        boxes, scores, labels = RetinaNetCandidates(model)(images)
    return [
        select(b, sc, lab, nms_threshold=s["nms_threshold"], max_detections=s["max_detections"])
        for b, sc, lab in zip(boxes.float(), scores.float(), labels, strict=True)
    ]


def load_torchvision_state(model: RetinaNet, state: dict) -> None:
    """A torchvision ``retinanet_resnet50_fpn`` / ``_v2`` state dict into ``model`` (same names); a
    UserError where it does not fit."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise UserError(f"weights do not fit this RetinaNet: {str(e).splitlines()[1].strip()}") from None


def load_backbone_state(model: RetinaNet, state: dict) -> int:
    """ImageNet weights of the trunk (a torchvision classification state dict) into ``backbone.body``;
    the classifier (``fc``) is left out. Returns the tensors loaded."""
    body = model.backbone.body
    wanted = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing, unexpected = body.load_state_dict(wanted, strict=False)
    if unexpected or len(wanted) == 0:
        raise ValueError(f"not a {model.settings['backbone']} state dict (unexpected {unexpected[:3]})")
    if any(not k.endswith("num_batches_tracked") for k in missing):
        raise ValueError(f"misses {missing[:3]}")
    return len(wanted)
