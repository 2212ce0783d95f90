"""The MLPerf 3D U-Net: 3x3x3 convolutions, instance norm and ReLU, strided convolutions down, transposed
convolutions up, skip connections by concatenation.

    model = UNet3D(width=32, levels=5)      # MLPerf's: channels 32, 64, 128, 256, 320 and a 320 bottleneck
    logits = model(volume)                   # [N, 1, D, H, W] -> [N, 3, D, H, W] (background, kidney, tumour)

Level ``i`` has ``min(width * 2**i, 10 * width)`` channels; the bottleneck halves the resolution once more,
so a patch side must be a multiple of ``2**levels`` (128 for MLPerf's 128^3 patches and 5 levels).
Module names follow the MLPerf reference (input_block, downsample, bottleneck, upsample, output), so its
published state_dicts load as they are.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def conv_block(in_channels: int, out_channels: int, stride: int = 1) -> nn.Sequential:
    """Conv3d 3x3x3 (no bias: the norm's shift replaces it), InstanceNorm3d (affine), ReLU."""
    return nn.Sequential(
        nn.Conv3d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.InstanceNorm3d(out_channels, affine=True),
        nn.ReLU(inplace=True),
    )


class DoubleConv(nn.Module):
    """Two conv blocks; the first one strided where the level halves the resolution."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv_block(in_channels, out_channels, stride)
        self.conv2 = conv_block(out_channels, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class UpsampleBlock(nn.Module):
    """Transposed conv 2x2x2 (stride 2, with bias), concatenation with the skip, two conv blocks."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.upsample_conv = nn.Sequential(
            nn.ConvTranspose3d(in_channels, out_channels, kernel_size=2, stride=2, bias=True)
        )
        self.conv1 = conv_block(2 * out_channels, out_channels)
        self.conv2 = conv_block(out_channels, out_channels)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = torch.cat((self.upsample_conv(x), skip), dim=1)
        return self.conv2(self.conv1(x))


class OutputLayer(nn.Module):
    def __init__(self, in_channels: int, classes: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def level_channels(width: int, levels: int) -> list[int]:
    """Channels of each level: width doubling per level, capped at 10 x width (MLPerf's 320 for 32)."""
    return [min(width * 2**level, 10 * width) for level in range(levels)]


class UNet3D(nn.Module):
    """3D U-Net of ``levels`` resolutions plus a bottleneck, ``width`` channels at full resolution."""

    def __init__(self, in_channels: int = 1, classes: int = 3, width: int = 32, levels: int = 5):
        super().__init__()
        if width < 1 or levels < 2:
            raise ValueError(f"UNet3D needs width >= 1 and levels >= 2, not {width} and {levels}")
        channels = level_channels(width, levels)
        self.width, self.levels, self.classes = width, levels, classes
        self.input_block = DoubleConv(in_channels, channels[0])
        self.downsample = nn.ModuleList(
            DoubleConv(i, o, stride=2) for i, o in zip(channels[:-1], channels[1:], strict=True)
        )
        self.bottleneck = DoubleConv(channels[-1], channels[-1], stride=2)
        ups = [UpsampleBlock(channels[-1], channels[-1])]
        ups += [UpsampleBlock(i, o) for i, o in zip(channels[:0:-1], channels[-2::-1], strict=True)]
        self.upsample = nn.ModuleList(ups)
        self.output = OutputLayer(channels[0], classes)

    @property
    def divisor(self) -> int:
        """A patch side must be a multiple of this (every level halves it, the bottleneck once more)."""
        return 2**self.levels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_block(x)
        skips = [x]
        for down in self.downsample:
            x = down(x)
            skips.append(x)
        x = self.bottleneck(x)
        for up, skip in zip(self.upsample, reversed(skips), strict=True):
            x = up(x, skip)
        return self.output(x)
