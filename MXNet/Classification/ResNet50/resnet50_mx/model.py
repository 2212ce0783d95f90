"""ResNet-50 v1.5 as a hybridizable Gluon block.

v1.5 puts the stride-2 of each down-sampling bottleneck on the 3x3 convolution (v1 has it on the first
1x1). Block and attribute names follow GluonCV's ``resnet50_v1b`` (conv1, bn1, layer1..layer4, fc;
bottleneck conv1..conv3, bn1..bn3, downsample), so its published ``.params`` files load as they are.
"""

from __future__ import annotations

from mxnet.gluon import HybridBlock, nn

from resnet50_mx import LAYOUTS

STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))  # (blocks, bottleneck width); output width = 4 x width
EXPANSION = 4


def _channel_axis(layout: str) -> int:
    return 1 if layout == "NCHW" else 3


class Bottleneck(HybridBlock):
    """1x1 reduce -> 3x3 (stride here: v1.5) -> 1x1 expand, plus the identity or a projection."""

    def __init__(
        self, in_width: int, width: int, stride: int, project: bool, layout: str, zero_init_last_gamma: bool
    ):
        super().__init__()
        axis, out_width = _channel_axis(layout), width * EXPANSION
        self.conv1 = nn.Conv2D(width, 1, use_bias=False, layout=layout, in_channels=in_width)
        self.bn1 = nn.BatchNorm(axis=axis, in_channels=width)
        self.conv2 = nn.Conv2D(
            width, 3, strides=stride, padding=1, use_bias=False, layout=layout, in_channels=width
        )
        self.bn2 = nn.BatchNorm(axis=axis, in_channels=width)
        self.conv3 = nn.Conv2D(out_width, 1, use_bias=False, layout=layout, in_channels=width)
        # A zero last gamma makes each residual branch start as the identity (helps large-batch training).
        self.bn3 = nn.BatchNorm(
            axis=axis, in_channels=out_width, gamma_initializer="zeros" if zero_init_last_gamma else "ones"
        )
        self.downsample = None
        if project:
            self.downsample = nn.HybridSequential()
            self.downsample.add(
                nn.Conv2D(out_width, 1, strides=stride, use_bias=False, layout=layout, in_channels=in_width),
                nn.BatchNorm(axis=axis, in_channels=out_width),
            )

    def hybrid_forward(self, F, x):
        residual = self.downsample(x) if self.downsample is not None else x
        out = F.Activation(self.bn1(self.conv1(x)), act_type="relu")
        out = F.Activation(self.bn2(self.conv2(out)), act_type="relu")
        out = self.bn3(self.conv3(out))
        return F.Activation(out + residual, act_type="relu")


class ResNet50(HybridBlock):
    """ResNet-50 v1.5: 25,557,032 trainable parameters for 1,000 classes.

    ``layout`` is the layout of the convolutions ("NHWC" is the fast one for tensor cores on GPU);
    ``input_layout`` is the layout of the images fed in (an NCHW input is transposed when the
    convolutions are NHWC). The output is logits of shape (batch, num_classes).
    """

    def __init__(
        self,
        num_classes: int = 1000,
        *,
        layout: str = "NCHW",
        input_layout: str = "NCHW",
        zero_init_last_gamma: bool = False,
    ):
        super().__init__()
        if layout not in LAYOUTS or input_layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r} / {input_layout!r}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.layout, self.input_layout, self.num_classes = layout, input_layout, num_classes
        axis = _channel_axis(layout)
        self.conv1 = nn.Conv2D(64, 7, strides=2, padding=3, use_bias=False, layout=layout, in_channels=3)
        self.bn1 = nn.BatchNorm(axis=axis, in_channels=64)
        self.maxpool = nn.MaxPool2D(3, strides=2, padding=1, layout=layout)
        in_width = 64
        for i, (blocks, width) in enumerate(STAGES):
            stage = nn.HybridSequential()
            for b in range(blocks):
                stride = 2 if (b == 0 and i > 0) else 1
                project = b == 0 and (stride != 1 or in_width != width * EXPANSION)
                stage.add(Bottleneck(in_width, width, stride, project, layout, zero_init_last_gamma))
                in_width = width * EXPANSION
            setattr(self, f"layer{i + 1}", stage)
        self.avgpool = nn.GlobalAvgPool2D(layout=layout)
        self.flat = nn.Flatten()
        self.fc = nn.Dense(num_classes, in_units=in_width)

    def hybrid_forward(self, F, x):
        if self.input_layout != self.layout:
            x = F.transpose(x, axes=(0, 2, 3, 1) if self.layout == "NHWC" else (0, 3, 1, 2))
        x = self.maxpool(F.Activation(self.bn1(self.conv1(x)), act_type="relu"))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flat(self.avgpool(x)))


def count_parameters(net: HybridBlock) -> int:
    """Trainable parameters (BatchNorm running statistics are not counted)."""
    total = 0
    for param in net.collect_params().values():
        if param.grad_req != "null":
            size = 1
            for dim in param.shape:
                size *= dim
            total += size
    return total


def build_model(num_classes: int = 1000, *, layout: str = "NCHW", input_layout: str = "NCHW", **kwargs):
    return ResNet50(num_classes, layout=layout, input_layout=input_layout, **kwargs)
