"""SSD loss: smooth-L1 on the offsets of positive default boxes plus cross-entropy on the positives and
the hardest negatives (three negatives per positive), normalised by the number of positives per image."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class SSDLoss(nn.Module):
    def __init__(self, neg_pos_ratio: int = 3) -> None:
        super().__init__()
        self.neg_pos_ratio = neg_pos_ratio

    def forward(
        self, loc: torch.Tensor, logits: torch.Tensor, loc_target: torch.Tensor, cls_target: torch.Tensor
    ) -> torch.Tensor:
        """``loc (B, D, 4)``, ``logits (B, D, C)`` from the model; targets from :func:`ssd.boxes.match`."""
        loc, logits = loc.float(), logits.float()
        positive = cls_target > 0
        num_pos = positive.sum(1)  # (B,)
        box_loss = F.smooth_l1_loss(loc, loc_target, reduction="none").sum(-1)
        box_loss = (box_loss * positive).sum(1)

        ce = F.cross_entropy(logits.transpose(1, 2), cls_target, reduction="none")  # (B, D)
        # Hard negatives: the background boxes with the largest loss, ranked by a double argsort.
        neg_ce = ce.masked_fill(positive, 0.0)
        rank = neg_ce.argsort(dim=1, descending=True).argsort(dim=1)
        num_neg = (self.neg_pos_ratio * num_pos).clamp(max=ce.shape[1])
        negative = rank < num_neg[:, None]
        cls_loss = (ce * (positive | negative)).sum(1)

        per_image = (box_loss + cls_loss) / num_pos.clamp(min=1)
        # Images with no objects contribute nothing (their negatives would have no count to follow).
        return (per_image * (num_pos > 0)).mean()
