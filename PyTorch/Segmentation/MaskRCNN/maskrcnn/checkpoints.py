"""Turn a torchvision Mask R-CNN state dict (registry ``maskrcnn-resnet50-fpn-torchvision-v1`` / ``-v2``)
into a model file that evaluate, detect and export read.

    FILE=$(bash scripts/download_checkpoint.sh pull maskrcnn-resnet50-fpn-torchvision-v1)
    python -m maskrcnn.checkpoints convert-torchvision "$FILE" results/torchvision_v1.pt --variant v1
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from zoo.cli import entry_point
from zoo.errors import UserError, one_line

from maskrcnn.model import build_model, load_torchvision_state

MODEL_DIR = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "maskrcnn_coco_8gpu.yaml"
COCO_CLASSES = 91  # torchvision's COCO head: category ids 1..90, 0 = background


def convert_torchvision(source, target, *, variant: str = "v1", recipe=DEFAULT_RECIPE) -> Path:
    """Check that ``source`` loads into our ``variant`` and write it with ``recipe`` (model.variant set)."""
    from zoo.io import atomic_write
    from zoo.recipe import load_recipe

    try:
        state = torch.load(source, map_location="cpu", weights_only=True)
        load_torchvision_state(build_model(COCO_CLASSES, variant=variant), state)
    except Exception as e:  # noqa: BLE001 - unpickling and layout problems read the same to a user
        line = one_line(e)
        raise UserError(
            f"{source} is not a torchvision Mask R-CNN {variant} state dict: {line[:200]}"
        ) from None
    r = load_recipe(recipe, {"model.variant": variant})
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target) as tmp:
        torch.save({"model": state, "recipe": r, "num_classes": COCO_CLASSES, "category_names": {}}, tmp)
    return target


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.checkpoints",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert-torchvision", help="torchvision state dict -> model file")
    c.add_argument("source")
    c.add_argument("target")
    c.add_argument("--variant", choices=("v1", "v2"), default="v1")
    a = parse_args(p, argv)
    print(convert_torchvision(a.source, a.target, variant=a.variant))


if __name__ == "__main__":
    main()
