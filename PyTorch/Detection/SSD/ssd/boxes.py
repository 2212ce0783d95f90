"""Default boxes of SSD300 v1.1, box encoding against them, matching and batched post-processing.

Boxes are normalised to [0, 1]. Ground truth and detections are ``(x1, y1, x2, y2)``; default boxes
are kept as ``(cx, cy, w, h)``. The default-box order is: feature map, then row, then column, then
the boxes of one location, which is the order the model's heads flatten their outputs in.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torchvision

# Offsets are divided by these before regression (the "variances" of the original SSD).
XY_VARIANCE = 0.1
WH_VARIANCE = 0.2


@dataclass(frozen=True)
class DefaultBoxSpec:
    """Geometry of the default boxes: one entry per feature map, from the largest map down."""

    image_size: int = 300
    feature_sizes: tuple[int, ...] = (38, 19, 10, 5, 3, 1)
    steps: tuple[int, ...] = (8, 16, 32, 64, 100, 300)
    # Box sizes in pixels; map k uses scales[k] and sqrt(scales[k] * scales[k + 1]).
    scales: tuple[int, ...] = (21, 45, 99, 153, 207, 261, 315)
    aspect_ratios: tuple[tuple[int, ...], ...] = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))

    @property
    def boxes_per_location(self) -> tuple[int, ...]:
        return tuple(2 + 2 * len(r) for r in self.aspect_ratios)


SSD300 = DefaultBoxSpec()


def default_boxes(spec: DefaultBoxSpec = SSD300) -> torch.Tensor:
    """All default boxes as a ``(num_boxes, 4)`` float32 tensor of ``(cx, cy, w, h)``, clipped to [0, 1]."""
    out = []
    for k, fsize in enumerate(spec.feature_sizes):
        cells = spec.image_size / spec.steps[k]
        small = spec.scales[k] / spec.image_size
        large = spec.scales[k + 1] / spec.image_size
        shapes = [(small, small), (math.sqrt(small * large),) * 2]
        for ratio in spec.aspect_ratios[k]:
            r = math.sqrt(ratio)
            shapes += [(small * r, small / r), (small / r, small * r)]
        for i, j in itertools.product(range(fsize), repeat=2):
            cx, cy = (j + 0.5) / cells, (i + 0.5) / cells
            out.extend((cx, cy, w, h) for w, h in shapes)
    return torch.tensor(out, dtype=torch.float32).clamp_(0, 1)


def cxcywh_to_xyxy(b: torch.Tensor) -> torch.Tensor:
    cxcy, wh = b[..., :2], b[..., 2:]
    return torch.cat([cxcy - wh / 2, cxcy + wh / 2], dim=-1)


def xyxy_to_cxcywh(b: torch.Tensor) -> torch.Tensor:
    return torch.cat([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], dim=-1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of ``a (..., M, 4)`` and ``b (..., N, 4)`` xyxy boxes: ``(..., M, N)``."""
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter).clamp(min=1e-12)


def encode(gt_xyxy: torch.Tensor, dboxes: torch.Tensor) -> torch.Tensor:
    """Regression targets of matched boxes ``(..., D, 4)`` against default boxes ``(D, 4)`` cxcywh."""
    g = xyxy_to_cxcywh(gt_xyxy)
    xy = (g[..., :2] - dboxes[:, :2]) / (XY_VARIANCE * dboxes[:, 2:])
    wh = torch.log(g[..., 2:].clamp(min=1e-6) / dboxes[:, 2:]) / WH_VARIANCE
    return torch.cat([xy, wh], dim=-1)


def decode(loc: torch.Tensor, dboxes: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`encode`: predicted offsets ``(..., D, 4)`` to xyxy boxes."""
    xy = loc[..., :2] * XY_VARIANCE * dboxes[:, 2:] + dboxes[:, :2]
    wh = torch.exp(loc[..., 2:] * WH_VARIANCE) * dboxes[:, 2:]
    return cxcywh_to_xyxy(torch.cat([xy, wh], dim=-1))


def match(
    gt_boxes: torch.Tensor,
    gt_labels: torch.Tensor,
    dboxes: torch.Tensor,
    iou_threshold: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Assign ground truth to default boxes for a whole batch at once, on the boxes' device.

    ``gt_boxes (B, M, 4)`` xyxy and ``gt_labels (B, M)`` are padded; padding has label 0 (background).
    Each default box takes the object it overlaps most if that IoU exceeds ``iou_threshold``; every
    object also keeps its single best default box whatever the IoU. Returns the encoded regression
    targets ``(B, D, 4)`` and class targets ``(B, D)`` (0 = background).
    """
    b, m = gt_labels.shape
    d = dboxes.shape[0]
    valid = gt_labels > 0
    iou = box_iou(gt_boxes, cxcywh_to_xyxy(dboxes)[None].expand(b, d, 4))  # (B, M, D)
    iou = iou.masked_fill(~valid[..., None], -1.0)
    best_iou, best_gt = iou.max(dim=1)  # per default box
    best_dbox = iou.argmax(dim=2)  # per object
    # Each real object claims its best default box; padding rows write into a spare column D.
    target_col = torch.where(valid, best_dbox, torch.full_like(best_dbox, d))
    obj_index = torch.arange(m, device=gt_labels.device).expand(b, m)
    best_gt = torch.cat([best_gt, best_gt.new_zeros(b, 1)], 1).scatter(1, target_col, obj_index)[:, :d]
    forced = torch.zeros(b, d + 1, dtype=torch.bool, device=gt_labels.device)
    forced = forced.scatter(1, target_col, True)[:, :d]
    positive = (best_iou > iou_threshold) | forced
    labels = torch.gather(gt_labels, 1, best_gt).masked_fill(~positive, 0)
    boxes = torch.gather(gt_boxes, 1, best_gt[..., None].expand(b, d, 4))
    loc = encode(boxes, dboxes).masked_fill(~positive[..., None], 0.0)
    return loc, labels


@dataclass
class Detections:
    """Detections of one image: xyxy boxes normalised to [0, 1], scores, class labels (1..C-1)."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor


def postprocess(
    loc: torch.Tensor,
    logits: torch.Tensor,
    dboxes: torch.Tensor,
    *,
    score_threshold: float = 0.05,
    nms_threshold: float = 0.5,
    max_detections: int = 200,
    candidates_per_class: int = 200,
) -> list[Detections]:
    """Decode a batch and keep the best ``max_detections`` boxes per image after per-class NMS."""
    boxes = decode(loc.float(), dboxes).clamp(0, 1)
    scores = torch.softmax(logits.float(), dim=-1)
    return [
        nms_one_image(
            boxes[i], scores[i], score_threshold, nms_threshold, max_detections, candidates_per_class
        )
        for i in range(boxes.shape[0])
    ]


def nms_one_image(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    score_threshold: float,
    nms_threshold: float,
    max_detections: int,
    candidates_per_class: int,
) -> Detections:
    """Per-class NMS of decoded ``boxes (D, 4)`` and class probabilities ``scores (D, C)``."""
    num_classes = scores.shape[1]
    fg = scores[:, 1:]  # background column dropped
    k = min(candidates_per_class, fg.shape[0])
    top_scores, top_idx = fg.topk(k, dim=0)  # (k, C-1): best candidates of every class
    classes = torch.arange(1, num_classes, device=scores.device).expand(k, num_classes - 1)
    top_scores, top_idx, classes = top_scores.flatten(), top_idx.flatten(), classes.flatten()
    keep = top_scores > score_threshold
    top_scores, top_idx, classes = top_scores[keep], top_idx[keep], classes[keep]
    cand = boxes[top_idx]
    kept = torchvision.ops.batched_nms(cand, top_scores, classes, nms_threshold)[:max_detections]
    return Detections(cand[kept], top_scores[kept], classes[kept])
