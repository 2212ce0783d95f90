"""RetinaNet's ``model:`` recipe section, checked without the framework: train.py calls
:func:`model_settings` before it imports torch, so a bad model key ends at once."""

from __future__ import annotations

from zoo.errors import UserError

BACKBONES = ("resnext50_32x4d", "resnet50", "resnet34", "resnet18")
# The recipe's model: section and what each key means (configs/*.yaml).
DEFAULTS = {
    "backbone": "resnext50_32x4d",
    "version": 1,  # 1: torchvision's retinanet_resnet50_fpn layout; 2: _v2 (P6 from C5, GroupNorm heads)
    "trainable_layers": 3,  # trunk stages trained (conv1 + layer1..4 = 5); the rest stay frozen
    "frozen_bn": True,  # the trunk's BatchNorm frozen (MLPerf, torchvision); false: trained (from scratch)
    "fpn_channels": 256,
    "anchor_sizes": [32, 64, 128, 256, 512],  # one per level, P3..P7
    "score_threshold": 0.05,
    "nms_threshold": 0.5,
    "candidates_per_level": 1000,
    "max_detections": 300,
}


def model_settings(recipe_model: dict | None) -> dict:
    """The recipe's ``model:`` section over :data:`DEFAULTS`; a UserError naming an unknown key or value."""
    settings = dict(DEFAULTS)
    for key, value in (recipe_model or {}).items():
        if key not in DEFAULTS:
            raise UserError(f"model.{key} is not a RetinaNet setting (known: {', '.join(DEFAULTS)})")
        settings[key] = value
    if settings["backbone"] not in BACKBONES:
        raise UserError(f"model.backbone {settings['backbone']!r} is not one of {', '.join(BACKBONES)}")
    if settings["version"] not in (1, 2):
        raise UserError(f"model.version must be 1 or 2, not {settings['version']!r}")
    if len(settings["anchor_sizes"]) != 5:
        raise UserError(f"model.anchor_sizes needs one size per level P3..P7, not {settings['anchor_sizes']}")
    return settings
