"""EfficientNet-B0..B4 and the WideSE variants (Tan & Le, 2019; NVIDIA DeepLearningExamples).

A stem (3x3/2 conv), seven stages of mobile inverted bottlenecks (MBConv: 1x1 expand, depthwise
k x k, squeeze-and-excitation, 1x1 project, stochastic depth on the residual), a 1x1 head conv,
global average pool, dropout and a linear classifier. Width and depth multipliers scale B0 to B4.

WideSE (DeepLearningExamples' ``efficientnet-widese-*``): the squeeze-and-excitation bottleneck is a
quarter of the block's expanded channels instead of a quarter of its input channels.

Module names and state_dict keys match timm's ``efficientnet_b0`` / ``efficientnet_b4`` (conv_stem,
bn1, blocks.S.B.{conv_pw, bn1, conv_dw, bn2, se.conv_reduce, se.conv_expand, conv_pwl, bn3},
conv_head, bn2, classifier), so timm's weights load directly (tests/test_model.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from efficientnet.variants import VARIANTS, variant_spec  # noqa: F401 - VARIANTS re-exported

# (block, repeats, kernel, stride, expansion, output channels) of B0's seven stages
STAGES = (
    ("ds", 1, 3, 1, 1, 16),
    ("ir", 2, 3, 2, 6, 24),
    ("ir", 2, 5, 2, 6, 40),
    ("ir", 3, 3, 2, 6, 80),
    ("ir", 3, 5, 1, 6, 112),
    ("ir", 4, 5, 2, 6, 192),
    ("ir", 1, 3, 1, 6, 320),
)


def round_channels(channels: float, divisor: int = 8) -> int:
    """Channels scaled by the width multiplier, to a multiple of 8, never 10% below the scaled value."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


def drop_path(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """Stochastic depth: zero the residual branch of whole samples with probability ``rate``."""
    if rate == 0.0 or not training:
        return x
    keep = 1.0 - rate
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask / keep


class SqueezeExcite(nn.Module):
    """Global pool -> 1x1 reduce -> SiLU -> 1x1 expand -> sigmoid gate on the channels."""

    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.conv_reduce = nn.Conv2d(channels, reduced, 1)
        self.conv_expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.conv_expand(F.silu(self.conv_reduce(x.mean((2, 3), keepdim=True))))
        return x * scale.sigmoid()


class DepthwiseSeparable(nn.Module):
    """The first stage's block (expansion 1): depthwise conv, SE, 1x1 project."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int, se_ch: int, drop_rate: float):
        super().__init__()
        self.conv_dw = nn.Conv2d(in_ch, in_ch, kernel, stride, kernel // 2, groups=in_ch, bias=False)
        self.bn1 = nn.BatchNorm2d(in_ch)
        self.se = SqueezeExcite(in_ch, se_ch)
        self.conv_pw = nn.Conv2d(in_ch, out_ch, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.has_skip, self.drop_rate = stride == 1 and in_ch == out_ch, drop_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv_pw(self.se(F.silu(self.bn1(self.conv_dw(x))))))
        return x + drop_path(out, self.drop_rate, self.training) if self.has_skip else out


class InvertedResidual(nn.Module):
    """MBConv: 1x1 expand, depthwise conv (carries the stride), SE, 1x1 project, residual when shapes match."""

    def __init__(self, in_ch, out_ch, kernel, stride, expansion, se_ch, drop_rate):
        super().__init__()
        mid = round_channels(in_ch * expansion)
        self.conv_pw = nn.Conv2d(in_ch, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv_dw = nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.se = SqueezeExcite(mid, se_ch)
        self.conv_pwl = nn.Conv2d(mid, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.has_skip, self.drop_rate = stride == 1 and in_ch == out_ch, drop_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.silu(self.bn1(self.conv_pw(x)))
        out = self.se(F.silu(self.bn2(self.conv_dw(out))))
        out = self.bn3(self.conv_pwl(out))
        return x + drop_path(out, self.drop_rate, self.training) if self.has_skip else out


class EfficientNet(nn.Module):
    """EfficientNet of a width/depth scaling; ``wide_se``: the SE bottleneck follows the expanded width."""

    def __init__(
        self,
        width: float = 1.0,
        depth: float = 1.0,
        num_classes: int = 1000,
        dropout: float = 0.2,
        drop_path_rate: float = 0.2,
        wide_se: bool = False,
    ):
        super().__init__()
        stem = round_channels(32 * width)
        self.conv_stem = nn.Conv2d(3, stem, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        plan = [(kind, math.ceil(repeats * depth), *rest) for kind, repeats, *rest in STAGES]
        total, index, in_ch = sum(p[1] for p in plan), 0, stem
        stages = []
        for kind, repeats, kernel, stride, expansion, out in plan:
            out_ch, blocks = round_channels(out * width), []
            for i in range(repeats):
                mid = round_channels(in_ch * expansion)
                se_ch = max(1, round((mid if wide_se else in_ch) * 0.25))
                rate, stride_i = drop_path_rate * index / total, stride if i == 0 else 1
                if kind == "ds":
                    blocks.append(DepthwiseSeparable(in_ch, out_ch, kernel, stride_i, se_ch, rate))
                else:
                    blocks.append(InvertedResidual(in_ch, out_ch, kernel, stride_i, expansion, se_ch, rate))
                in_ch, index = out_ch, index + 1
            stages.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*stages)
        self.num_features = round_channels(1280 * width)
        self.conv_head = nn.Conv2d(in_ch, self.num_features, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(self.num_features)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.num_features, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The paper's initialisation: fan-out normal convs, uniform classifier, BatchNorm at identity."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels // module.groups
                nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.weight.shape[0])
                nn.init.uniform_(module.weight, -bound, bound)
                nn.init.zeros_(module.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.bn1(self.conv_stem(x)))
        return F.silu(self.bn2(self.conv_head(self.blocks(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.forward_features(x).mean((2, 3))))


def efficientnet(
    variant: str = "b0",
    *,
    num_classes: int = 1000,
    wide_se: bool = False,
    width: float | None = None,
    dropout: float | None = None,
    drop_path_rate: float = 0.2,
) -> EfficientNet:
    """EfficientNet-``variant`` (b0..b4); ``width`` overrides the variant's width multiplier (tiny CPU
    models), ``dropout`` its classifier dropout."""
    spec = variant_spec(variant)
    return EfficientNet(
        width=spec.width if width is None else width,
        depth=spec.depth,
        num_classes=num_classes,
        dropout=spec.dropout if dropout is None else dropout,
        drop_path_rate=drop_path_rate,
        wide_se=wide_se,
    )
