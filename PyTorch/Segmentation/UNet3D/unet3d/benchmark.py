"""Training patches/s and evaluation volumes/s of our 3D U-Net (the recipe's step and sliding window) next to
MONAI's DynUNet of the same depth and widths trained the MONAI way (eager, AMP, monai.losses.DiceCELoss),
in one run, as a table and a JSON report (zoo.bench schema).

    python -m unet3d.benchmark --recipe configs/unet3d_kits19_1gpu.yaml --models ours,monai --amp bf16
    python -m unet3d.benchmark --set train.compile=reduce-overhead --set train.channels_last=true

"ours" is the recipe: every lever is a recipe key (``--set``). Both models see the same random patches
(batch run.batch_per_gpu) and the same random volume (``--volume``, default 2 x the patch side).
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
from typing import TYPE_CHECKING

import zoo.cli
from zoo.bench import measure, write_report
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.recipe import run_config
from zoo.torch import autocast, grad_scaler

from unet3d import DEFAULT_RECIPE

if TYPE_CHECKING:
    import torch

MODELS = ("ours", "monai")


def monai_unet(recipe: dict) -> torch.nn.Module:
    """MONAI's DynUNet with our depth, widths, kernels and strides (instance norm, the MLPerf layout)."""
    from monai.networks.nets import DynUNet

    from unet3d.model import level_channels

    levels, width = int(recipe["model"]["levels"]), int(recipe["model"]["width"])
    filters = [*level_channels(width, levels), level_channels(width, levels)[-1]]
    return DynUNet(
        spatial_dims=3, in_channels=1, out_channels=3, kernel_size=[3] * (levels + 1),
        strides=[1] + [2] * levels, upsample_kernel_size=[2] * levels, filters=filters,
        norm_name=("INSTANCE", {"affine": True}), act_name=("relu", {"inplace": True}), trans_bias=True,
    )  # fmt: skip


def monai_train_step(model, recipe: dict, device):
    """One MONAI-style training step: eager, autocast, monai.losses.DiceCELoss, SGD with Nesterov momentum."""
    import torch
    from monai.losses import DiceCELoss

    precision = run_config(recipe).precision
    optimizer = torch.optim.SGD(
        model.parameters(), lr=float(recipe["optimizer"]["lr"]), momentum=0.9, nesterov=True
    )
    criterion = DiceCELoss(to_onehot_y=True, softmax=True, include_background=False)
    scaler = grad_scaler(device, precision)

    def step(images, labels):
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = criterion(model(images).float(), labels.long())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def run(args) -> list[dict]:
    import torch

    from unet3d.inference import segment_volume
    from unet3d.step import build_train_step, patch_shape

    recipe = zoo.cli.recipe_from_args(args)
    run_cfg = run_config(recipe)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    patch = patch_shape(recipe)
    batch = run_cfg.batch_per_gpu
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 1, *patch, generator=generator).to(device)
    labels = torch.randint(0, 3, (batch, 1, *patch), generator=generator, dtype=torch.uint8).to(device)
    volume = torch.randn(1, 1, *(args.volume or [2 * s for s in patch]), generator=generator).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    results = []
    for name in args.models:
        if name == "ours":
            step = build_train_step(recipe, device)
            model, train = step.model, step
        else:
            model = monai_unet(recipe).to(device)
            train = monai_train_step(model, recipe, device)
        model.train()
        timed = measure(
            lambda train=train: train(images, labels),
            items_per_call=batch,
            warmup=args.warmup,
            iters=args.iters,
            sync=sync,
        )
        model.eval()
        evaluated = measure(
            lambda model=model: segment_volume(model, volume, patch, run_cfg.precision), items_per_call=1, warmup=1,
            iters=max(1, args.iters // 4), sync=sync,
        )  # fmt: skip
        results.append(
            {
                "model": name,
                "train_patches_per_s": timed["throughput"],
                "eval_volumes_per_s": evaluated["throughput"],
            }
        )
    return results


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m unet3d.benchmark", description=__doc__.split("\n")[0])
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, resume=False, data_dir=False, results_dir=False)
    p.add_argument("--models", default="ours,monai", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--batch-size", type=int, default=None, help="patches per step (run.batch_per_gpu)")
    p.add_argument(
        "--volume", type=int, nargs=3, default=None, help="evaluation volume D H W (default 2 x patch)"
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20, help="timed training steps (sliding windows: a quarter)")
    p.add_argument("--device", default=None)
    p.add_argument("--output", default=None, help="write the JSON report here")
    args = zoo.cli.parse_args(p, argv)

    import torch

    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models or set(args.models) - set(MODELS):
        raise UserError(f"--models takes a comma list of {', '.join(MODELS)}")
    if args.iters < 1 or args.warmup < 0:
        raise UserError("--iters must be >= 1 and --warmup >= 0")
    results = run(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    date = datetime.date.today().isoformat()
    print(
        f"| model | training patches/s | evaluation volumes/s |  ({name}, {date}, {args.amp or 'recipe precision'})"
    )
    print("| --- | --- | --- |")
    for row in results:
        print(f"| {row['model']} | {row['train_patches_per_s']:.2f} | {row['eval_volumes_per_s']:.3f} |")
    by_model = {row["model"]: row for row in results}
    if {"ours", "monai"} <= set(by_model):
        ratio = by_model["ours"]["train_patches_per_s"] / by_model["monai"]["train_patches_per_s"]
        print(f"ours / MONAI training: {ratio:.2f}x")
    if args.output:
        write_report(pathlib.Path(args.output), results, device=name, recipe=args.recipe, set=args.set)
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
