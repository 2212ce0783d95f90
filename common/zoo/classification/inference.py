"""The inference model: what ``evaluate.py`` scores, ``export.py`` writes and ``benchmark.py`` times.

    model = inference_model(trained, amp="fp16", channels_last=True)   # a copy, BatchNorm folded
    logits = model(images)                                             # FP32 images in, FP32 logits out

Each eval-mode BatchNorm is folded into the convolution before it (one kernel fewer per conv, the
same function), the weights are cast to the precision outright (no autocast, no per-call weight
casts), and the model takes and returns float32 tensors, casting at the edges: a caller, an
exported file and Triton's ``config.pbtxt`` see the same FP32 interface whatever runs inside.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from zoo.torch import amp_dtype


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Fold, in place, every BatchNorm2d into the Conv2d registered just before it (eval mode)."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    def fold(parent: nn.Module) -> None:
        names = list(parent._modules)
        for i, name in enumerate(names):
            child = parent._modules[name]
            following = parent._modules[names[i + 1]] if i + 1 < len(names) else None
            if isinstance(child, nn.Conv2d) and isinstance(following, nn.BatchNorm2d):
                parent._modules[name] = fuse_conv_bn_eval(child, following)
                parent._modules[names[i + 1]] = nn.Identity()
            else:
                fold(child)

    fold(model.eval())
    return model


class InferenceModel(nn.Module):
    """``network`` in ``dtype`` (and channels_last): FP32 images in, FP32 logits out."""

    def __init__(self, network: nn.Module, dtype: torch.dtype, channels_last: bool):
        super().__init__()
        self.network, self.dtype = network, dtype
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        images = images.to(dtype=self.dtype).contiguous(memory_format=self.memory_format)
        return self.network(images).float()


def inference_model(
    model: nn.Module, *, amp: str = "fp32", channels_last: bool = False, fold_bn: bool = True, device=None
) -> InferenceModel:
    """An eval-mode copy of ``model`` for inference: BatchNorm folded (unless ``fold_bn=False``), weights
    in ``amp`` (bf16 / fp16 / fp32), channels_last if asked, on ``device`` (default: where ``model`` is).
    ``model`` itself is left as it was."""
    dtype = amp_dtype(amp) or torch.float32
    network = copy.deepcopy(model).eval()
    if fold_bn:
        network = fold_batchnorm(network)
    if device is not None:
        network = network.to(device)
    network = network.to(dtype)
    if channels_last:
        network = network.to(memory_format=torch.channels_last)
    for parameter in network.parameters():
        parameter.requires_grad_(False)
    return InferenceModel(network, dtype, channels_last).eval()


def checkpoint_classes(path) -> list[str] | None:
    """The class names a training checkpoint of ours carries (its ``classes`` field: the class folders of
    the data it was trained on, e.g. ImageNet's 1000 synsets), for the export's Triton labels; None for a
    checkpoint without them (a synthetic-data run) or another file (published weights)."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # the export's own read of the weights names what is wrong with the file
        return None
    classes = saved.get("classes") if isinstance(saved, dict) else None
    return [str(name) for name in classes] if classes else None
