"""The MLPerf loss and score: Dice over the foreground classes (kidney, tumour), background left out.

    loss = DiceCELoss()(logits, labels)            # (1 - mean soft Dice + cross-entropy) / 2
    per_class = dice_scores(logits, labels)        # [N, 2] hard Dice of kidney and tumour per volume

Ours rather than MONAI's DiceLoss / DiceMetric: MLPerf smooths numerator and denominator by 1e-6, so a
class absent from both prediction and label scores 1 (MONAI's metric gives NaN or 0 there), and the
score the benchmark's target 0.908 is measured in is this one.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

SMOOTH = 1e-6


def one_hot(labels: torch.Tensor, classes: int) -> torch.Tensor:
    """[N, 1, D, H, W] integer labels -> [N, classes, D, H, W] float."""
    return F.one_hot(labels[:, 0].long(), classes).permute(0, 4, 1, 2, 3).float()


def dice(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[N, C] Dice of each volume and foreground class; both [N, C, D, H, W] (probabilities or one-hot)."""
    axes = tuple(range(2, prediction.ndim))
    prediction, target = prediction[:, 1:], target[:, 1:]
    intersection = (prediction * target).sum(axes)
    return (2 * intersection + SMOOTH) / (prediction.sum(axes) + target.sum(axes) + SMOOTH)


class DiceCELoss(nn.Module):
    """MLPerf's loss: the mean of (1 - soft Dice of the foreground classes) and the cross-entropy."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        probabilities = torch.softmax(logits, dim=1)
        soft_dice = dice(probabilities, one_hot(labels, logits.shape[1]))
        cross_entropy = F.cross_entropy(logits, labels[:, 0].long())
        return ((1 - soft_dice).mean() + cross_entropy) / 2


def dice_scores(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[N, C-1] hard Dice (argmax prediction) of kidney and tumour of each volume."""
    classes = logits.shape[1]
    prediction = one_hot(logits.argmax(1, keepdim=True), classes)
    return dice(prediction, one_hot(labels, classes))
