"""The published EfficientNet scalings, without the framework: train.py checks ``model.variant`` here
before it imports torch."""

from __future__ import annotations

from dataclasses import dataclass

from zoo.errors import UserError


@dataclass(frozen=True)
class Variant:
    """A published scaling: width and depth multipliers, training/evaluation resolution, dropout."""

    width: float
    depth: float
    image_size: int
    dropout: float


VARIANTS = {
    "b0": Variant(1.0, 1.0, 224, 0.2),
    "b1": Variant(1.0, 1.1, 240, 0.2),
    "b2": Variant(1.1, 1.2, 260, 0.3),
    "b3": Variant(1.2, 1.4, 300, 0.3),
    "b4": Variant(1.4, 1.8, 380, 0.4),
}


def variant_spec(variant: str) -> Variant:
    """The scaling of ``variant`` (b0..b4); a UserError naming ``model.variant`` for another name."""
    if variant not in VARIANTS:
        raise UserError(f"model.variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    return VARIANTS[variant]
