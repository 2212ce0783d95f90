"""SSD300 v1.1: a ResNet-50 trunk (through conv4, 38x38 at 300x300 input), five extra blocks and
3x3 convolutional heads on six feature maps (38, 19, 10, 5, 3, 1) with 4/6/6/6/4/4 boxes per cell.

Outputs are ``loc (N, 8732, 4)`` (offsets against the default boxes of :mod:`ssd.boxes`) and
``logits (N, 8732, num_classes)`` with class 0 the background.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping

import torch
import torch.nn as nn
import torchvision
from zoo.errors import UserError

from ssd.boxes import SSD300, DefaultBoxSpec

COCO_NUM_CLASSES = 81  # 80 object classes + background


class ResNet50Trunk(nn.Module):
    """torchvision's ResNet-50 (v1.5) through layer3, with layer3's first block at stride 1.

    Keeping conv4 at stride 8 gives a 38x38 map at 300x300 input, the first SSD feature map.
    """

    out_channels = 1024

    def __init__(self) -> None:
        super().__init__()
        r = torchvision.models.resnet50(weights=None)
        first = r.layer3[0]
        first.conv1.stride = (1, 1)
        first.conv2.stride = (1, 1)
        first.downsample[0].stride = (1, 1)
        self.conv1, self.bn1, self.relu, self.maxpool = r.conv1, r.bn1, r.relu, r.maxpool
        self.layer1, self.layer2, self.layer3 = r.layer1, r.layer2, r.layer3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer3(self.layer2(self.layer1(x)))


def _extra_block(c_in: int, c_mid: int, c_out: int, stride: int, padding: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_mid, 1, bias=False),
        nn.BatchNorm2d(c_mid),
        nn.ReLU(inplace=True),
        nn.Conv2d(c_mid, c_out, 3, stride=stride, padding=padding, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class SSD300(nn.Module):
    """SSD300 v1.1 with a ResNet-50 backbone (about 22.9M parameters with 81 classes)."""

    feature_channels = (1024, 512, 512, 256, 256, 256)
    extra_mid_channels = (256, 256, 128, 128, 128)

    def __init__(self, num_classes: int = COCO_NUM_CLASSES, spec: DefaultBoxSpec = SSD300) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.spec = spec
        self.backbone = ResNet50Trunk()
        ch = self.feature_channels
        self.extras = nn.ModuleList(
            _extra_block(ch[i], self.extra_mid_channels[i], ch[i + 1], *((2, 1) if i < 3 else (1, 0)))
            for i in range(5)
        )
        nb = spec.boxes_per_location
        self.loc_heads = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for c, n in zip(ch, nb, strict=True))
        self.conf_heads = nn.ModuleList(
            nn.Conv2d(c, n * num_classes, 3, padding=1) for c, n in zip(ch, nb, strict=True)
        )
        self._init_new_layers()

    def _init_new_layers(self) -> None:
        for module in [*self.extras, *self.loc_heads, *self.conf_heads]:
            for p in module.modules():
                if isinstance(p, nn.Conv2d):
                    nn.init.xavier_uniform_(p.weight)
                    if p.bias is not None:
                        nn.init.zeros_(p.bias)

    def feature_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = [self.backbone(x)]
        for block in self.extras:
            feats.append(block(feats[-1]))
        return feats

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[0]
        locs, confs = [], []
        for f, lh, ch in zip(self.feature_maps(x), self.loc_heads, self.conf_heads, strict=True):
            # NCHW -> N, H, W, boxes*k: flattening gives the default-box order (map, row, col, box).
            locs.append(lh(f).permute(0, 2, 3, 1).reshape(n, -1, 4))
            confs.append(ch(f).permute(0, 2, 3, 1).reshape(n, -1, self.num_classes))
        return torch.cat(locs, 1), torch.cat(confs, 1)


@torch.no_grad()
def estimate_batchnorm_statistics(model: nn.Module, batches, forward) -> None:
    """Set every BatchNorm's running statistics to the plain average over ``forward(batch)`` for each
    of ``batches``, run in training mode with the weights fixed (momenta restored afterwards).

    After a short run (or none) the running averages lag far behind the weights and eval-mode
    outputs are poor; averaging over fresh batches fixes that (long runs barely change).
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [bn.momentum for bn in norms]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average
    model.train()
    for batch in batches:
        forward(batch)
    for bn, momentum in zip(norms, momenta, strict=True):
        bn.momentum = momentum


PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def fold_batchnorm(model: nn.Module) -> int:
    """Merge every BatchNorm2d that follows a Conv2d into that convolution (its running statistics
    and affine parameters become the convolution's weight and bias) and put an Identity in its
    place; in place, for a model in eval mode. Returns how many were folded.

    The pairs are a ``Sequential``'s neighbours (``conv, bn``) and attributes named ``convN``/``bnN``
    (torchvision's ResNet blocks and stem).
    """
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    folded = 0
    for module in list(model.modules()):
        names = [name for name, _ in module.named_children()]
        if isinstance(module, nn.Sequential):
            pairs = list(zip(names, names[1:], strict=False))
        else:
            pairs = [("conv" + n[2:], n) for n in names if n.startswith("bn") and "conv" + n[2:] in names]
        for conv_name, bn_name in pairs:
            conv, bn = getattr(module, conv_name), getattr(module, bn_name)
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                setattr(module, conv_name, fuse_conv_bn_eval(conv, bn))
                setattr(module, bn_name, nn.Identity())
                folded += 1
    return folded


class InferenceSSD(nn.Module):
    """SSD300 for inference in one precision: FP32 images in, FP32 ``loc``/``logits`` out; the
    weights and the computation in between are ``dtype`` (built by :func:`build_inference_model`)."""

    def __init__(self, model: SSD300, dtype: torch.dtype, channels_last: bool = False) -> None:
        super().__init__()
        self.model = model
        self.num_classes = model.num_classes
        self.dtype = dtype
        self.channels_last = channels_last

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = images.to(self.dtype)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        loc, logits = self.model(images)
        return loc.float(), logits.float()


def build_inference_model(
    model: SSD300, precision: str = "fp32", *, fold: bool = True, channels_last: bool = False
) -> InferenceSSD:
    """The inference model of ``model`` (a copy; the original is left as it is): eval mode, BatchNorm
    folded into the convolutions (``fold``), weights in ``precision`` (fp32, fp16 or bf16), no
    gradients. Evaluation, the benchmark and export (ONNX, TorchScript) all use this model."""
    if precision not in PRECISIONS:
        raise UserError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if isinstance(model, InferenceSSD):
        model = model.model
    net = copy.deepcopy(model).eval()
    if fold:
        fold_batchnorm(net)
    net = net.to(PRECISIONS[precision]).requires_grad_(False)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    return InferenceSSD(net, PRECISIONS[precision], channels_last).eval()


class SSDWithPostprocess(nn.Module):
    """SSD300 followed by box decoding and softmax: ``boxes (N, D, 4)`` xyxy in [0, 1], ``scores (N, D, C)``.

    Exportable to ONNX (no data-dependent shapes); NMS runs after it. ``model`` is an SSD300 or
    the :class:`InferenceSSD` built from it.
    """

    def __init__(self, model: nn.Module, dboxes: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("dboxes", dboxes, persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from ssd.boxes import decode

        loc, logits = self.model(x)
        return decode(loc.float(), self.dboxes).clamp(0, 1), torch.softmax(logits.float(), dim=-1)


def _strip_prefixes(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in state.items():
        k = re.sub(r"^(module\.|model\.|_orig_mod\.)+", "", k)
        k = re.sub(r"^layers\.(\d)\.", lambda m: f"layer{int(m.group(1)) + 1}.", k)
        out[k] = v
    return out


def load_backbone_state(model: SSD300, state: Mapping[str, torch.Tensor]) -> int:
    """Copy ResNet-50 classification weights (torchvision or this zoo's layout) into the trunk.

    Returns the number of tensors loaded; raises ValueError with the reason if the layout is not a
    ResNet-50 one. The fc layer and layer4 are ignored (SSD does not use them).
    """
    if "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if "model" in state and isinstance(state["model"], Mapping):
        state = state["model"]
    state = _strip_prefixes(state)
    own = model.backbone.state_dict()
    missing = [k for k in own if k not in state]
    if missing:
        sample = ", ".join(list(state)[:3])
        raise ValueError(
            f"not a ResNet-50 state dict: {len(missing)} trunk tensors missing (keys look like {sample})"
        )
    bad = [k for k in own if tuple(state[k].shape) != tuple(own[k].shape)]
    if bad:
        raise ValueError(
            f"ResNet-50 tensor {bad[0]} has shape {tuple(state[bad[0]].shape)}, want {tuple(own[bad[0]].shape)}"
        )
    model.backbone.load_state_dict({k: state[k] for k in own})
    return len(own)


# COCO 2017's 80 category ids, in the sorted order that labels 1..80 follow.
COCO_CATEGORY_IDS = [
    *range(1, 12),
    *range(13, 26),
    27,
    28,
    *range(31, 45),
    *range(46, 66),
    67,
    70,
    *range(72, 83),
    *range(84, 91),
]


def convert_ngc_state(state: Mapping[str, torch.Tensor], num_defaults=(4, 6, 6, 6, 4, 4)) -> dict:
    """NVIDIA DeepLearningExamples SSD300 state dict (NGC ``nvidia_ssdpyt_*``) in this model's layout.

    Their trunk is ``feature_extractor.feature_extractor.{0,1,4,5,6}`` (conv1, bn1, layer1..3) and
    their extras ``additional_blocks``: renamed. Their heads' outputs are read as ``(N, 4, boxes*H*W)``
    (channel = coord * boxes + box; default boxes ordered map, box, row, column), ours as
    ``(N, H*W*boxes, 4)`` (channel = box * 4 + coord; map, row, column, box): the head channels are
    permuted so that both give the same boxes with their own default-box order.
    """
    if "model" in state and isinstance(state["model"], Mapping):
        state = state["model"]
    trunk = {"0": "conv1", "1": "bn1", "4": "layer1", "5": "layer2", "6": "layer3"}
    out = {}
    for k, v in state.items():
        k = re.sub(r"^(module\.)+", "", k)
        m = re.match(r"^feature_extractor\.feature_extractor\.(\d)\.(.*)$", k)
        if m and m.group(1) in trunk:
            out[f"backbone.{trunk[m.group(1)]}.{m.group(2)}"] = v
            continue
        m = re.match(r"^(loc|conf)\.(\d)\.(weight|bias)$", k)
        if m:
            kind, i = m.group(1), int(m.group(2))
            nd = num_defaults[i]
            per_box = v.shape[0] // nd  # 4 coords, or the class count
            perm = [c * nd + b for b in range(nd) for c in range(per_box)]
            out[f"{'loc' if kind == 'loc' else 'conf'}_heads.{i}.{m.group(3)}"] = v[perm]
            continue
        if k.startswith("additional_blocks."):
            out["extras." + k[len("additional_blocks.") :]] = v
            continue
        if k.startswith("feature_extractor."):
            continue  # their unused trunk parts (none in released checkpoints)
        raise ValueError(f"unexpected key {k} for an NGC SSD300 checkpoint")
    if not any(k.startswith("conf_heads.") for k in out):
        raise ValueError("no conf.* heads: not an NGC SSD300 checkpoint")
    return out
