"""Training and inference images/s of our Mask R-CNN next to torchvision's ``maskrcnn_resnet50_fpn``
(weights=None, eager, AMP), in one call on the same device with the same synthetic batch (images of
``--image-size`` pixels, 4 instances with masks each).

    python -m maskrcnn.benchmark --mode both --batch-size 8 --amp bf16 --output bench.json
    python -m maskrcnn.benchmark --smoke --device cpu        # tiny sizes on a CPU: checks the path

"ours" is the recipe (``--recipe``, default the 1-GPU COCO recipe, with ``--set KEY=VALUE`` overrides):
its model built by maskrcnn.model, its ``speed`` section (compile, cudnn_benchmark)
applied by ``prepare_for_speed``, and its training step (maskrcnn.step.TrainStep, the step
train.py runs) timed on ``--batch-size`` images a step (no accumulation) in ``--amp``.
torchvision's model runs the same step eagerly with cuDNN autotuning off, as torchvision's detection
reference script does.

    python -m maskrcnn.benchmark --mode train --set speed.compile=false    # one lever off

``--gpus 1,2,4`` is the scaling mode every PyTorch model shares (zoo.scaling): the recipe's training
step (:func:`scaling_step`: its batch per GPU and accumulation, synthetic images of ``data.min_size``
pixels) on 1, 2 and 4 GPUs through train.sh's launcher, steady-state windows, replicas compared,
scaling against 1 GPU of the same call. Its flags: ``--gpus N,N,.. [--recipe FILE] [--set KEY=VALUE]
[--amp ..] [--batch-size N] [--window-seconds S] [--windows N] [--warmup N] [--output FILE]``
(``--gpus 1 --help`` lists them).
"""

from __future__ import annotations

import argparse
import itertools
import sys

import zoo.scaling
from zoo.cli import AMP_CHOICES, entry_point
from zoo.cli import parse_args as parse_cli
from zoo.coco import report_benchmark
from zoo.errors import UserError
from zoo.recipe import run_config
from zoo.torch import autocast, close_distributed, fast_math, init_distributed

from maskrcnn import DEFAULT_RECIPE

# Different synthetic batches the scaling mode cycles through.
SCALING_BATCHES = 4


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--mode", choices=("train", "inference", "both"), default="both")
    p.add_argument("--models", default="ours,torchvision", help="comma list of: ours, torchvision")
    p.add_argument("--recipe", default=str(DEFAULT_RECIPE), help="recipe whose model is 'ours'")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the 'ours' recipe (repeatable), e.g. speed.compile=false",
    )
    p.add_argument("--batch-size", type=int, default=8, help="images per step")
    p.add_argument("--image-size", type=int, default=800, help="square synthetic images of this side")
    p.add_argument("--amp", choices=AMP_CHOICES, default="bf16", help="mixed precision (fp32: no autocast)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda where CUDA is)")
    p.add_argument("--output", help="JSON report (zoo.bench/v1)")
    p.add_argument("--smoke", action="store_true", help="batch 1, 128-pixel images, 1 warm-up, 1 iteration")
    a = parse_cli(p, argv)
    if a.smoke:
        a.batch_size, a.image_size, a.warmup, a.iters = 1, 128, 1, 1
    return a


def synthetic_batch(batch: int, size: int, device, seed: int = 0):
    """Images in [0, 1] and targets with 4 boxes and matching rectangular masks per image."""
    import torch

    g = torch.Generator().manual_seed(seed)
    images, targets = [], []
    for _ in range(batch):
        xy = (torch.rand(4, 2, generator=g) * size * 0.6).floor()
        wh = (torch.rand(4, 2, generator=g) * size * 0.3 + size * 0.05).floor()
        boxes = torch.cat([xy, xy + wh], 1)
        masks = torch.zeros(4, size, size, dtype=torch.uint8)
        for m, (x0, y0, x1, y1) in zip(masks, boxes.int().tolist(), strict=True):
            m[y0:y1, x0:x1] = 1
        labels = torch.randint(1, 91, (4,), generator=g)
        images.append(torch.rand(3, size, size, generator=g).to(device))
        targets.append({"boxes": boxes.to(device), "labels": labels.to(device), "masks": masks.to(device)})
    return images, targets


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The recipe's training step (maskrcnn.step.TrainStep on the recipe's model, its speed section
    applied, DDP-wrapped for several processes) on synthetic batches of run.batch_per_gpu square images
    of ``data.min_size`` pixels, run.accumulation of them a step: zoo.scaling's step."""
    from maskrcnn.model import model_from_recipe, prepare_for_speed
    from maskrcnn.step import TrainStep

    run = run_config(recipe)
    min_size = recipe["data"]["min_size"]
    size = min(min_size) if isinstance(min_size, list) else min_size
    model = prepare_for_speed(model_from_recipe(recipe, 91).to(device), recipe, device)
    step = TrainStep(recipe, model, device, world_size=world_size)
    batches = [synthetic_batch(run.batch_per_gpu, size, device, seed) for seed in range(SCALING_BATCHES)]
    micro_batches = itertools.cycle(batches)
    step.train()
    return zoo.scaling.Step(
        lambda: step(micro_batches), items=run.batch_per_gpu * run.accumulation, unit="img/s", model=model
    )


def steps_for(model, recipe: dict, a, device, *, speed: bool):
    """(train_step, infer_step) closures over one synthetic batch: ``recipe``'s training step
    (maskrcnn.step.TrainStep, ``--batch-size`` images a step in ``--amp``) and eval-mode inference.
    ``speed`` (ours) applies the recipe's speed settings; else (torchvision) the model runs eager with
    cuDNN autotuning off."""
    import torch

    from maskrcnn.model import prepare_for_speed
    from maskrcnn.step import TrainStep

    model = model.to(device)
    if speed:
        prepare_for_speed(model, recipe, device)
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = False
    batches = itertools.repeat(synthetic_batch(a.batch_size, a.image_size, device))
    step = TrainStep(recipe, model, device)

    def train_step():
        step.train()
        step(batches)

    def infer_step():
        import torch

        with torch.no_grad():
            model.eval()
            with autocast(device, a.amp):
                model(next(batches)[0])

    return train_step, infer_step


def benchmark_recipe(a) -> dict:
    """``--recipe`` with ``--set`` items at the benchmark's image size, ``--batch-size`` images a step
    (no accumulation) and ``--amp``: the step both models run."""
    from zoo.recipe import load_recipe, parse_overrides

    overrides = parse_overrides(a.set)
    overrides.update({"data.min_size": a.image_size, "data.max_size": max(a.image_size, 1333)})
    overrides.update({"run.batch_per_gpu": a.batch_size, "run.accumulation": 1, "run.precision": a.amp})
    return load_recipe(a.recipe, overrides, known_keys_from=DEFAULT_RECIPE)


def build(name: str, recipe: dict):
    """Ours from the recipe at the benchmark's image size; torchvision's ``maskrcnn_resnet50_fpn`` with
    its own defaults at the same size."""
    from maskrcnn.model import model_from_recipe

    if name == "ours":
        return model_from_recipe(recipe, 91)
    from torchvision.models.detection import maskrcnn_resnet50_fpn

    size = {"min_size": recipe["data"]["min_size"], "max_size": recipe["data"]["max_size"]}
    return maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91, **size)


def run(a) -> list[dict]:
    import torch
    from zoo.bench import measure

    env, device = init_distributed(a.device)
    fast_math(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    modes = ("train", "inference") if a.mode == "both" else (a.mode,)
    names = [m for m in a.models.split(",") if m]
    for m in names:
        if m not in ("ours", "torchvision"):
            raise UserError(f"unknown model '{m}' in --models (choose from ours, torchvision)")
    recipe = benchmark_recipe(a)
    results = []
    for name in names:
        # Same initial weights for every model and run: with random weights the number of proposals
        # that survive NMS, and so the ROI heads' work, changes from one initialisation to the next.
        torch.manual_seed(0)
        train_step, infer_step = steps_for(build(name, recipe), recipe, a, device, speed=name == "ours")
        for mode in modes:
            fn = train_step if mode == "train" else infer_step
            s = measure(
                fn, items_per_call=a.batch_size, warmup=a.warmup, iters=a.iters, sync=sync, per_call=True
            )
            results.append(
                {
                    "model": name,
                    "mode": mode,
                    "batch_size": a.batch_size,
                    "image_size": a.image_size,
                    "amp": a.amp,
                    **s,
                }
            )
            print(
                f"{name:12s} {mode:9s} batch {a.batch_size} @ {a.image_size}px: {s['throughput']:.2f} img/s "
                f"(p50 step {s['latency_ms']['p50']:.1f} ms)",
                file=sys.stderr,
            )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for mode in modes:
        by = {r["model"]: r["throughput"] for r in results if r["mode"] == mode}
        if "ours" in by and "torchvision" in by:
            ratio = by["ours"] / by["torchvision"]
            for r in results:
                if r["mode"] == mode and r["model"] == "ours":
                    r["speedup_vs_torchvision"] = ratio
            print(f"{mode}: ours / torchvision maskrcnn_resnet50_fpn = {ratio:.2f}x", file=sys.stderr)
    close_distributed()
    return results if env.rank == 0 else []


@entry_point
def main(argv=None) -> None:
    if zoo.scaling.asked_for(argv):
        zoo.scaling.main(argv, module="maskrcnn.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE)
        return
    a = parse_args(argv)
    results = run(a)
    if a.output and results:
        report_benchmark(a.output, results, a.device)


if __name__ == "__main__":
    main()
