"""Anchors, box encoding and RetinaNet's candidate detections, on whole batches on the device.

Anchors follow torchvision's ``AnchorGenerator`` for RetinaNet exactly (three scales per octave,
three aspect ratios, one size per FPN level, rounded base anchors, integer strides) and boxes are
encoded as torchvision's ``BoxCoder(weights=(1, 1, 1, 1))`` does, so a torchvision checkpoint gives
the same detections here.
"""

from __future__ import annotations

import math

import torch

ASPECT_RATIOS = (0.5, 1.0, 2.0)
# exp(dw) is clamped at 1000 / 16, as torchvision's BoxCoder does.
BBOX_XFORM_CLIP = math.log(1000.0 / 16)


def level_scales(size: int) -> list[int]:
    """The three anchor sizes of one level: ``size`` x 2^0, 2^(1/3), 2^(2/3), truncated as torchvision does."""
    return [size, int(size * 2 ** (1.0 / 3)), int(size * 2 ** (2.0 / 3))]


def base_anchors(size: int, device=None) -> torch.Tensor:
    """(9, 4) anchors centred on 0: aspect ratio major, scale minor, rounded (torchvision's order)."""
    scales = torch.as_tensor(level_scales(size), dtype=torch.float32, device=device)
    ratios = torch.as_tensor(ASPECT_RATIOS, dtype=torch.float32, device=device)
    h_ratios = torch.sqrt(ratios)
    w_ratios = 1 / h_ratios
    ws = (w_ratios[:, None] * scales[None, :]).view(-1)
    hs = (h_ratios[:, None] * scales[None, :]).view(-1)
    return (torch.stack([-ws, -hs, ws, hs], dim=1) / 2).round()


def anchors_per_level(image_hw, feature_hws, sizes, device=None) -> list[torch.Tensor]:
    """Each level's anchors ``(H_l * W_l * 9, 4)`` xyxy in pixels of an ``image_hw`` input: cells row by
    row, the nine anchors of a cell together (the order of the heads' outputs)."""
    out = []
    for (h, w), size in zip(feature_hws, sizes, strict=True):
        stride_h, stride_w = image_hw[0] // h, image_hw[1] // w
        shifts_x = torch.arange(0, w, device=device, dtype=torch.int32) * stride_w
        shifts_y = torch.arange(0, h, device=device, dtype=torch.int32) * stride_h
        shift_y, shift_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
        shift_x, shift_y = shift_x.reshape(-1), shift_y.reshape(-1)
        shifts = torch.stack((shift_x, shift_y, shift_x, shift_y), dim=1).to(torch.float32)
        out.append((shifts.view(-1, 1, 4) + base_anchors(size, device).view(1, -1, 4)).reshape(-1, 4))
    return out


def encode(boxes: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Regression targets (dx, dy, dw, dh) of ``boxes`` against ``anchors`` (same shape, xyxy)."""
    aw, ah = anchors[..., 2] - anchors[..., 0], anchors[..., 3] - anchors[..., 1]
    ax, ay = anchors[..., 0] + 0.5 * aw, anchors[..., 1] + 0.5 * ah
    gw, gh = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    gx, gy = boxes[..., 0] + 0.5 * gw, boxes[..., 1] + 0.5 * gh
    return torch.stack(((gx - ax) / aw, (gy - ay) / ah, torch.log(gw / aw), torch.log(gh / ah)), dim=-1)


def decode(deltas: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Boxes xyxy from ``deltas`` against ``anchors`` (same shape): the inverse of :func:`encode`."""
    deltas = deltas.float()
    aw, ah = anchors[..., 2] - anchors[..., 0], anchors[..., 3] - anchors[..., 1]
    ax, ay = anchors[..., 0] + 0.5 * aw, anchors[..., 1] + 0.5 * ah
    dw = deltas[..., 2].clamp(max=BBOX_XFORM_CLIP)
    dh = deltas[..., 3].clamp(max=BBOX_XFORM_CLIP)
    cx, cy = deltas[..., 0] * aw + ax, deltas[..., 1] * ah + ay
    half_w, half_h = 0.5 * torch.exp(dw) * aw, 0.5 * torch.exp(dh) * ah
    return torch.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), dim=-1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of ``a (B, N, 4)`` against ``b (B, M, 4)``: ``(B, N, M)``."""
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    top_left = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    bottom_right = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(-1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter)


def candidates(
    logits: torch.Tensor,
    deltas: torch.Tensor,
    anchors: list[torch.Tensor],
    image_hw,
    *,
    score_threshold: float = 0.05,
    per_level: int = 1000,
):
    """Each image's best ``per_level`` (anchor, class) pairs of every level, decoded and clipped, with a
    fixed shape and no wait for the device: ``boxes (B, L*k, 4)``, ``scores (B, L*k)`` (0 where at or
    below ``score_threshold``: not a candidate) and ``labels (B, L*k)``. The pairs torchvision's
    RetinaNet.postprocess_detections keeps before NMS."""
    num_classes = logits.shape[-1]
    out_boxes, out_scores, out_labels = [], [], []
    start = 0
    for level_anchors in anchors:
        count = level_anchors.shape[0]
        scores = torch.sigmoid(logits[:, start : start + count].float()).flatten(1)
        scores = torch.where(scores > score_threshold, scores, torch.zeros_like(scores))
        # Padding to at least k pairs keeps topk's k fixed for any image size (ONNX, small images).
        scores = torch.cat([scores, scores.new_zeros(scores.shape[0], per_level)], dim=1)
        top, index = scores.topk(per_level, dim=1)
        anchor_index = torch.div(index, num_classes, rounding_mode="floor").clamp(max=count - 1)
        level_deltas = torch.gather(
            deltas[:, start : start + count], 1, anchor_index[..., None].expand(-1, -1, 4)
        )
        boxes = decode(level_deltas, level_anchors[anchor_index])
        out_boxes.append(boxes)
        out_scores.append(top)
        out_labels.append(index % num_classes)
        start += count
    boxes = torch.cat(out_boxes, dim=1)
    height, width = image_hw
    boxes = torch.stack(
        (
            boxes[..., 0].clamp(0, width),
            boxes[..., 1].clamp(0, height),
            boxes[..., 2].clamp(0, width),
            boxes[..., 3].clamp(0, height),
        ),
        dim=-1,
    )
    return boxes, torch.cat(out_scores, dim=1), torch.cat(out_labels, dim=1)


def select(boxes, scores, labels, *, nms_threshold: float = 0.5, max_detections: int = 300):
    """One image's detections from its candidates: class-wise NMS, best ``max_detections`` first."""
    from torchvision.ops import batched_nms

    keep = scores > 0
    boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
    keep = batched_nms(boxes, scores, labels, nms_threshold)[:max_detections]
    return boxes[keep], scores[keep], labels[keep]
