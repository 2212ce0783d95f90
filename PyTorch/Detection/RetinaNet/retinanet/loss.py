"""RetinaNet's loss on a whole batch on the device, with no wait for the host: anchors matched to the
boxes (IoU >= 0.5 foreground, < 0.4 background, between ignored, and every box keeps its best anchors),
the sigmoid focal loss over foreground and background anchors and the L1 loss of the foreground
anchors' box offsets, each divided by the image's foreground count and averaged over the images:
torchvision's RetinaNet loss, batched instead of a Python loop over images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from retinanet.boxes import box_iou, encode

FOREGROUND_IOU = 0.5
BACKGROUND_IOU = 0.4


def match(anchors: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor):
    """For every anchor ``(A, 4)`` of each image: the index of its box in ``boxes (B, M, 4)`` and whether
    it is foreground, background or neither. ``labels (B, M)`` is -1 on padding. Returns
    ``(matched (B, A) int64, foreground (B, A) bool, valid (B, A) bool)``: valid = foreground or
    background."""
    present = labels >= 0  # (B, M)
    iou = box_iou(anchors.expand(boxes.shape[0], -1, -1), boxes)  # (B, A, M)
    iou = torch.where(present[:, None, :], iou, torch.full_like(iou, -1.0))
    best_iou, matched = iou.max(dim=2)  # (B, A)
    # Low-quality matches: an anchor that is some box's best (ties included) stays foreground.
    best_of_box = iou.max(dim=1, keepdim=True).values  # (B, 1, M)
    is_best = ((iou == best_of_box) & present[:, None, :] & (best_of_box > 0)).any(dim=2)
    foreground = (best_iou >= FOREGROUND_IOU) | is_best
    valid = foreground | (best_iou < BACKGROUND_IOU)
    return matched, foreground, valid


def focal_loss(logits: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25, gamma: float = 2.0):
    """Elementwise sigmoid focal loss (torchvision.ops.sigmoid_focal_loss, reduction none)."""
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    return (alpha * targets + (1 - alpha) * (1 - targets)) * loss


def retinanet_loss(
    logits: torch.Tensor,
    deltas: torch.Tensor,
    anchors: torch.Tensor,
    boxes: torch.Tensor,
    labels: torch.Tensor,
    *,
    alpha: float = 0.25,
    gamma: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(classification loss, box regression loss), device scalars: ``logits (B, A, K)``, ``deltas
    (B, A, 4)`` from the heads, ``anchors (A, 4)``, padded ``boxes (B, M, 4)`` in pixels, ``labels
    (B, M)`` 0..K-1 (-1: padding)."""
    logits, deltas = logits.float(), deltas.float()
    with torch.no_grad():
        matched, foreground, valid = match(anchors, boxes, labels)
        fg_count = foreground.sum(dim=1).clamp(min=1).float()  # (B,)
        target_labels = torch.gather(labels, 1, matched).clamp(min=0)
        classes = F.one_hot(target_labels, logits.shape[-1]).to(logits.dtype) * foreground[..., None]
        target_boxes = torch.gather(boxes, 1, matched[..., None].expand(-1, -1, 4))
        # Background anchors get a harmless target (the anchor itself): their offsets are masked out.
        target_boxes = torch.where(foreground[..., None], target_boxes, anchors.expand_as(target_boxes))
        target_deltas = encode(target_boxes, anchors.expand_as(target_boxes))
    per_anchor = focal_loss(logits, classes, alpha, gamma).sum(dim=2) * valid
    classification = (per_anchor.sum(dim=1) / fg_count).mean()
    l1 = (deltas - target_deltas).abs().sum(dim=2) * foreground
    regression = (l1.sum(dim=1) / fg_count).mean()
    return classification, regression
