"""Mask R-CNN with a ResNet-50-FPN backbone, assembled from torchvision's detection building blocks.

    model = build_model(num_classes=91, variant="v1", min_size=800, max_size=1333)

The module tree is torchvision's (``backbone.body``, ``backbone.fpn``, ``rpn``, ``roi_heads``), so a
state dict of torchvision's ``maskrcnn_resnet50_fpn`` (``variant="v1"``) or ``maskrcnn_resnet50_fpn_v2``
(``variant="v2"``) loads with :func:`load_torchvision_state` and gives the same outputs. Labels are
COCO category ids (torchvision's convention: 91 classes for COCO, 0 = background), so those
checkpoints score COCO directly. The ResNet-50 trunk uses frozen BatchNorm (statistics and affine
fixed, as MLPerf's reference and torchvision's pretrained recipe); ``frozen_bn=False`` keeps plain
BatchNorm for runs from scratch on tiny data, where no pretrained statistics exist.

Inputs are lists of ``(3, H, W)`` float images in [0, 1]; the model normalises and resizes them
(shorter side ``min_size``, longer at most ``max_size``) and maps boxes and masks back to each image.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import nn
from torchvision.models import resnet18, resnet50
from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
from torchvision.models.detection.faster_rcnn import (
    FastRCNNConvFCHead,
    FastRCNNPredictor,
    TwoMLPHead,
    _default_anchorgen,
)
from torchvision.models.detection.mask_rcnn import MaskRCNN, MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.rpn import RPNHead
from torchvision.ops.misc import FrozenBatchNorm2d
from zoo.errors import UserError

# v1/v2: torchvision's two Mask R-CNN ResNet-50-FPN layouts. "tiny": a ResNet-18 trunk and 64-channel
# FPN and heads in the same structure, for CPU tests and smoke runs only (no published checkpoint).
VARIANTS = ("v1", "v2", "tiny")
# The RPN's NMS (recipe key speed.rpn_nms): maskrcnn.rpn_nms's batched kernels, or torchvision's loop
RPN_NMS = ("batched", "torchvision")

# The MLPerf reference's settings (maskrcnn-benchmark e2e_mask_rcnn_R_50_FPN_1x) where torchvision's
# defaults differ: 1000 RPN proposals per image after NMS in training (torchvision keeps 2000).
TINY_CHANNELS = 64
MLPERF_SETTINGS = {
    "rpn_pre_nms_top_n_train": 2000,
    "rpn_post_nms_top_n_train": 1000,
    "rpn_pre_nms_top_n_test": 1000,
    "rpn_post_nms_top_n_test": 1000,
}


def build_model(
    num_classes: int = 91,
    *,
    variant: str = "v1",
    frozen_bn: bool = True,
    trainable_layers: int = 3,
    min_size: int | tuple[int, ...] = 800,
    max_size: int = 1333,
    **settings,
) -> MaskRCNN:
    """Mask R-CNN ResNet-50-FPN; ``settings`` are torchvision ``MaskRCNN`` keywords (rpn_*, box_*).

    ``trainable_layers`` counts ResNet stages from the top that train (3: layer2..layer4, the stem and
    layer1 stay fixed, as both MLPerf's reference and torchvision train it).
    """
    if variant not in VARIANTS:
        raise UserError(f"unknown Mask R-CNN variant '{variant}' (choose from {', '.join(VARIANTS)})")
    if not 0 <= trainable_layers <= 5:
        raise UserError(f"trainable_layers must be 0..5, got {trainable_layers}")
    trunk = resnet50(weights=None, norm_layer=FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d)
    if variant == "tiny":
        trunk = resnet18(weights=None, norm_layer=FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d)
        backbone = BackboneWithFPN(
            trunk, {f"layer{i}": str(i - 1) for i in range(1, 5)}, [64, 128, 256, 512], TINY_CHANNELS
        )
        heads = {
            "box_head": TwoMLPHead(TINY_CHANNELS * 7 * 7, 256),
            "box_predictor": FastRCNNPredictor(256, num_classes),
            "mask_head": MaskRCNNHeads(TINY_CHANNELS, [TINY_CHANNELS] * 4, 1),
            "mask_predictor": MaskRCNNPredictor(TINY_CHANNELS, TINY_CHANNELS, num_classes),
        }
        num_classes = None  # the predictors above carry it
    elif variant == "v1":
        backbone = _resnet_fpn_extractor(trunk, trainable_layers)
        heads = {}
    else:
        backbone = _resnet_fpn_extractor(trunk, trainable_layers, norm_layer=nn.BatchNorm2d)
        anchors = _default_anchorgen()
        heads = {
            "rpn_anchor_generator": anchors,
            "rpn_head": RPNHead(backbone.out_channels, anchors.num_anchors_per_location()[0], conv_depth=2),
            "box_head": FastRCNNConvFCHead(
                (backbone.out_channels, 7, 7), [256, 256, 256, 256], [1024], norm_layer=nn.BatchNorm2d
            ),
            "mask_head": MaskRCNNHeads(
                backbone.out_channels, [256, 256, 256, 256], 1, norm_layer=nn.BatchNorm2d
            ),
        }
    return MaskRCNN(
        backbone, num_classes=num_classes, min_size=min_size, max_size=max_size, **heads, **settings
    )


def model_from_recipe(recipe: dict, num_classes: int) -> MaskRCNN:
    """The model a recipe's ``model`` and ``data`` sections describe, with the RPN's NMS its
    ``speed.rpn_nms`` names: "torchvision" (image after image) or "batched" (maskrcnn.rpn_nms: the
    same proposals from one batched NMS of every image and level; CUDA only, torchvision's elsewhere)."""
    m = dict(recipe.get("model", {}))
    d = recipe.get("data", {})
    min_size = d.get("min_size", 800)
    model = build_model(
        num_classes,
        variant=m.pop("variant", "v1"),
        frozen_bn=m.pop("frozen_bn", True),
        trainable_layers=m.pop("trainable_layers", 3),
        min_size=tuple(min_size) if isinstance(min_size, list) else min_size,
        max_size=d.get("max_size", 1333),
        **m,
    )
    rpn_nms = recipe.get("speed", {}).get("rpn_nms", "torchvision")
    if rpn_nms not in RPN_NMS:
        raise UserError(f"speed.rpn_nms must be one of {', '.join(RPN_NMS)}, got '{rpn_nms}'")
    # Triton defines its kernels at import (interpreted or compiled): imported only when asked for.
    # CPU-only PyTorch has no Triton, and no CUDA for the kernels: torchvision's filter, same proposals.
    if rpn_nms == "batched" and importlib.util.find_spec("triton") is not None:
        from maskrcnn.rpn_nms import use_rpn_nms

        use_rpn_nms(model, rpn_nms)
    return model


def prepare_for_speed(model: MaskRCNN, recipe: dict, device) -> MaskRCNN:
    """Apply the recipe's ``speed`` section to ``model`` (already on ``device``), in place.

    ``compile``: ``torch.compile`` the parts whose shapes do not change from step to step (backbone
    with FPN, RPN head, box head); the mask head sees a different number of regions every step and
    stays eager. Compiling in place keeps the state-dict keys, so checkpoints are unchanged.
    ``cudnn_benchmark``: cuDNN autotuning. Off for Mask R-CNN: the ROI heads' shapes change every
    step, and tuning each new shape costs more than it saves (PERF.md).
    Speed settings act on a GPU only; on a CPU the model runs as built. ``rpn_nms`` is applied by
    :func:`model_from_recipe` instead, so that evaluation and export, which build the model from a
    checkpoint's recipe, run the same RPN filter.
    """
    s = recipe.get("speed", {})
    if torch.device(device).type != "cuda":
        return model
    torch.backends.cudnn.benchmark = bool(s.get("cudnn_benchmark", False))
    if s.get("compile", False):
        for part in (model.backbone, model.rpn.head, model.roi_heads.box_head):
            part.compile()
    return model


def load_torchvision_state(model: MaskRCNN, state: dict) -> None:
    """Load a torchvision ``maskrcnn_resnet50_fpn`` / ``_v2`` state dict (BatchNorm's
    ``num_batches_tracked`` entries are dropped where the trunk is frozen); raises on any mismatch."""
    own = model.state_dict()
    state = {k: v for k, v in state.items() if k in own or not k.endswith("num_batches_tracked")}
    model.load_state_dict(state, strict=True)


def load_backbone_state(model: MaskRCNN, state: dict) -> int:
    """Load ImageNet ResNet-50 weights (torchvision's layout) into the trunk; returns tensors loaded.

    The classifier (``fc.*``) is not part of the trunk; every other trunk tensor must be present."""
    body = model.backbone.body
    own = body.state_dict()
    wanted = {k: v for k, v in state.items() if k in own}
    missing = sorted(set(own) - set(wanted) - {k for k in own if k.endswith("num_batches_tracked")})
    if missing:
        raise ValueError(
            f"not a ResNet-50 state dict: {len(missing)} trunk tensors missing, e.g. {missing[0]}"
        )
    body.load_state_dict(wanted, strict=False)
    return len(wanted)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def inference_outputs(model: MaskRCNN, image: torch.Tensor) -> dict:
    """One image's detections: boxes (N, 4) xyxy pixels, labels, scores, masks (N, 1, H, W) in [0, 1]."""
    model.eval()
    return model([image])[0]


class SingleImageModel(nn.Module):
    """The inference model: one ``(3, H, W)`` image -> (boxes, labels, scores, masks)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor):
        out = self.model([image])[0]
        return out["boxes"], out["labels"], out["scores"], out["masks"]
