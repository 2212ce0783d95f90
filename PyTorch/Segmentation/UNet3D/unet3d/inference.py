"""Sliding-window inference over a whole volume, as MLPerf evaluates: windows of the training patch
size overlapping by half, their logits blended with Gaussian weights (deviation 0.125 x the window), the
volume padded with the value of air after normalisation.

    logits = segment_volume(model, image, patch=(128,) * 3, precision="bf16")   # [1, 3, D, H, W] float32

MONAI's ``sliding_window_inference`` does the windowing and blending. ``predictor`` may be any callable
from a batch of windows to their logits: the Triton client passes one that asks the server.
"""

from __future__ import annotations

import torch
from zoo.torch import autocast

OVERLAP = 0.5
SIGMA_SCALE = 0.125
PADDING_VALUE = -2.2  # (-79 HU - 101) / 76.9, rounded as MLPerf pads: air after normalisation


@torch.no_grad()
def segment_volume(
    model,
    image: torch.Tensor,
    patch,
    precision: str = "fp32",
    *,
    overlap: float = OVERLAP,
    window_batch: int = 1,
) -> torch.Tensor:
    """Logits [1, classes, D, H, W] (float32) of ``image`` [1, 1, D, H, W] by Gaussian-blended windows."""
    from monai.inferers import sliding_window_inference

    def predictor(windows: torch.Tensor) -> torch.Tensor:
        with autocast(windows.device, precision):
            return model(windows).float()

    return sliding_window_inference(
        image, roi_size=tuple(patch), sw_batch_size=window_batch, predictor=predictor, overlap=overlap,
        mode="gaussian", sigma_scale=SIGMA_SCALE, padding_mode="constant", cval=PADDING_VALUE,
    )  # fmt: skip


def predictor_of(fn):
    """A sliding-window predictor from a numpy function (windows [N,1,*patch] float32 -> logits)."""

    def predictor(windows: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(fn(windows.cpu().numpy())).to(windows.device)

    return predictor
