"""The network: one builder that training, evaluation, export and the benchmark all call."""

from __future__ import annotations

import torch
from torch import nn

from skeleton.data import CLASSES, FEATURES


class Classifier(nn.Module):
    """A small MLP over the 8x8 digits (pixel values 0..16)."""

    def __init__(self, hidden: int, classes: int = CLASSES):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(FEATURES, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x / 16.0)


def build_model(recipe: dict) -> Classifier:
    """The recipe's network (``model:`` section)."""
    return Classifier(hidden=int(recipe["model"]["hidden"]))
