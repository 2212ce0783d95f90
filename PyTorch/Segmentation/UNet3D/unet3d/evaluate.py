"""Mean Dice of a trained 3D U-Net on the held-out volumes, by the sliding-window inference of training.

    python -m unet3d.evaluate --checkpoint results/checkpoint.pt --data-dir /data/kits19_npy [--amp bf16]

Prints the mean Dice and each class's, and writes RESULTS_DIR/eval.json. A training checkpoint carries
its recipe (width, levels, patch, precision, the sliding window's overlap): evaluation uses it unless
``--recipe`` is given, and ``--set`` / ``--amp`` change it; they give the settings of a bare weights file.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import zoo.cli
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.io import atomic_write
from zoo.recipe import run_config

from unet3d import DEFAULT_RECIPE
from unet3d.synthetic import synthetic_cases


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m unet3d.evaluate", description=__doc__.split("\n")[0])
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, resume=False, data_help="prepared KiTS19 folder")
    p.add_argument("--checkpoint", default=None, help="training checkpoint or weights file")
    p.add_argument("--pretrained", default=None, help="a registry name (checkpoints.yaml) instead of a file")
    p.add_argument("--synthetic", action="store_true", help="the recipe's synthetic evaluation volumes")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda if available)")
    return zoo.cli.parse_args(p, argv)


def evaluation_cases(recipe: dict, data_dir, synthetic: bool) -> dict:
    """The held-out cases: dataset.json's val split, or the synthetic recipe's."""
    from unet3d.data import load_cases, synthetic_split
    from unet3d.step import patch_shape

    if synthetic:
        data = recipe["data"]
        made = synthetic_cases(
            int(data["synthetic_cases"]), tuple(data["synthetic_shape"]), patch_shape(recipe),
            seed=run_config(recipe).seed,
        )  # fmt: skip
        return synthetic_split(made, int(data["synthetic_val_cases"]))["val"]
    if not data_dir:
        raise UserError("give --data-dir (a prepared KiTS19 folder) or --synthetic")
    return load_cases(data_dir)["val"]


def score(args) -> dict:
    import torch

    from unet3d.checkpoints import checkpoint_recipe, trained_model
    from unet3d.engine import evaluate
    from unet3d.step import patch_shape

    recipe = zoo.cli.recipe_from_args(args, saved=checkpoint_recipe(args.checkpoint))
    precision = run_config(recipe).precision
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, recipe = trained_model(recipe, args.checkpoint, args.pretrained)
    patch = patch_shape(recipe)
    cases = evaluation_cases(recipe, args.data_dir, args.synthetic)
    metrics = evaluate(
        model.to(device), cases, device, precision, patch=patch, overlap=float(recipe["eval"]["overlap"]),
        window_batch=int(recipe["eval"]["window_batch"]),
    )  # fmt: skip
    return {
        **metrics,
        "precision": precision,
        "patch": list(patch),
        "checkpoint": args.checkpoint or args.pretrained,
    }


@entry_point
def main(argv=None) -> None:
    args = parse_args(argv)
    result = score(args)
    print(
        f"mean Dice {result['dice']:.4f} (kidney {result['dice_kidney']:.4f}, tumour {result['dice_tumour']:.4f}) "
        f"over {result['samples']} volumes, {result['precision']}"
    )
    out = pathlib.Path(args.results_dir) / "eval.json"
    with atomic_write(out) as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
