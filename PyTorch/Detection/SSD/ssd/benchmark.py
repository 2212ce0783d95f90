"""Training and inference images/s of our SSD300 (a recipe) next to the same network written with
torchvision's ``SSD`` class and torchvision's ``ssd300_vgg16``, on the same device and synthetic batch.

    python -m ssd.benchmark --batch-size 64 --amp bf16 --output bench.json
    python -m ssd.benchmark --models ours --set compile_mode=reduce-overhead   # the recipe with one lever set
    python -m ssd.benchmark --models ours --variant compile=false              # and a row without compiling
    python -m ssd.benchmark --gpus 1,2,4 --recipe configs/ssd300_coco_8gpu_65ep.yaml   # scaling (zoo.scaling)
    python -m ssd.benchmark --smoke --device cpu                                # seconds on a CPU: checks the path

"ours" is built from --recipe (default: the 1-GPU recipe) and --set overrides, with the training
step that train.py runs (ssd.step.TrainStep: matching, forward, loss, backward, SGD, schedule) on
the batch that ``train.py --synthetic`` uses, and for inference the model that evaluation and export
use (ssd.model.build_inference_model: BatchNorm folded, weights in --amp's precision) plus decoding
and per-class NMS. The baselines (ssd.baselines) run eager under autocast, as a user would call
them: a list of images and target dicts (they resize, normalise and match inside), channels_last
and a fused SGD as ours. Before timing, every model's BatchNorm statistics are estimated on the
batch (BATCHNORM_PASSES training-mode passes), so that untrained weights give bounded scores.

``--gpus 1,2,4`` is the scaling mode every PyTorch model shares (zoo.scaling): the recipe's training
step (:func:`scaling_step`) on 1, 2 and 4 GPUs through train.sh's launcher, per-GPU batch fixed,
steady-state windows, replicas compared, scaling against 1 GPU of the same call. Its flags:
``--gpus N,N,.. [--recipe FILE] [--set KEY=VALUE] [--amp ..] [--batch-size N] [--window-seconds S]
[--windows N] [--warmup N] [--output FILE]`` (``--gpus 1 --help`` lists them).
"""

from __future__ import annotations

import argparse
import itertools
import sys

import zoo.cli
import zoo.scaling
from zoo.cli import entry_point
from zoo.coco import report_benchmark
from zoo.errors import UserError
from zoo.recipe import flag, run_config
from zoo.torch import autocast, close_distributed, distributed_model, fast_math, grad_scaler, init_distributed

from ssd import DEFAULT_RECIPE

MODELS = ("ours", "torchvision-ssd", "ssd300_vgg16")  # ours and ssd.baselines.BASELINES
# Training-mode passes over the batch that set every model's BatchNorm statistics before inference:
# with fresh ones (mean 0, variance 1) the activations of untrained weights grow through the
# network, nearly every box clears the score threshold and NMS dominates the inference time.
BATCHNORM_PASSES = 3
# The flags of the benchmark before levers became recipe keys.
RENAMED = {
    "--compile": "--set compile=true",
    "--channels-last": "--set channels_last=true",
    "--no-channels-last": "--set channels_last=false",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m ssd.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="also measure ours with these recipe overrides on top of --set (one row each; repeatable)",
    )
    p.add_argument("--mode", choices=("train", "inference", "both"), default="both")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of: {', '.join(MODELS)}")
    p.add_argument("--batch-size", type=int, help="per process (recipe: run.batch_per_gpu)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compiling happens here)")
    p.add_argument("--iters", type=int, default=30, help="timed steps per window")
    p.add_argument("--windows", type=int, default=3, help="training: the median window's images/s")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK where CUDA is)")
    p.add_argument(
        "--num-classes", type=int, default=81, help="ours and torchvision-ssd; ssd300_vgg16 has 91"
    )
    p.add_argument("--output", help="JSON report (zoo.bench/v1)")
    p.add_argument("--smoke", action="store_true", help="batch 2, 1 warm-up, 2 iterations, no compiling")
    a = zoo.cli.parse_args(p, argv, renamed=RENAMED)
    if a.smoke:
        a.batch_size, a.warmup, a.iters, a.windows = 2, 1, 2, 1
        a.set = [*a.set, "compile=false"]
    return a


def synthetic_batch(batch_size: int, num_classes: int, device):
    """The batch of ``train.py --synthetic`` (normalised random images, 8 boxes per image)."""
    from ssd.data import SyntheticLoader

    return SyntheticLoader(batch_size, 1, num_classes=num_classes, device=device).batch


# Different synthetic batches the scaling mode cycles through (as train.py --synthetic's, other seeds).
SCALING_BATCHES = 4


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The recipe's training step (ssd.step.TrainStep, DDP-wrapped for several processes and compiled as
    the recipe says) on synthetic batches of batch per GPU x accumulation images: zoo.scaling's step."""
    from ssd.data import SyntheticLoader
    from ssd.step import TrainStep

    run = run_config(recipe)
    images = run.batch_per_gpu * run.accumulation
    step = TrainStep(recipe, device, steps_per_epoch=1000, world_size=world_size)
    loader = SyntheticLoader(images, SCALING_BATCHES, device=device, variants=SCALING_BATCHES)
    batches = itertools.cycle(loader.batches)
    step.train()

    def call():
        batch = next(batches)
        return step(batch.images, batch.boxes, batch.labels)

    return zoo.scaling.Step(call, items=images, unit="img/s", model=step.model)


def ours_steps(recipe: dict, a, device, world):
    """(train_step, infer_step) of our SSD300: the recipe's training step and the inference model."""
    import torch

    from ssd.boxes import postprocess
    from ssd.model import build_inference_model, estimate_batchnorm_statistics
    from ssd.step import TrainStep

    step = TrainStep(recipe, device, steps_per_epoch=1000, num_classes=a.num_classes, world_size=world)
    run = run_config(recipe)
    batch = synthetic_batch(run.batch_per_gpu * run.accumulation, a.num_classes, device)

    def forward(images) -> None:
        with autocast(device, run.precision):
            step.model(images)

    estimate_batchnorm_statistics(step.model, [batch.images] * BATCHNORM_PASSES, forward)
    infer_model = build_inference_model(step.model, run.precision, channels_last=step.channels_last)
    step.train()

    def train_step():
        step(batch.images, batch.boxes, batch.labels)

    @torch.no_grad()
    def infer_step():
        loc, logits = infer_model(batch.images)
        postprocess(loc, logits, step.dboxes)

    return train_step, infer_step


def baseline_steps(name: str, recipe: dict, a, device, world):
    """(train_step, infer_step) of a torchvision baseline, called as a user would call it."""
    import torch

    from ssd.baselines import BASELINES
    from ssd.model import estimate_batchnorm_statistics

    model = BASELINES[name](a.num_classes) if name == "torchvision-ssd" else BASELINES[name]()
    model = model.to(device).to(memory_format=torch.channels_last)
    run = run_config(recipe)
    batch = synthetic_batch(run.batch_per_gpu, a.num_classes, device)
    images = list(batch.images)
    targets = [{"boxes": b * 300, "labels": lab} for b, lab in zip(batch.boxes, batch.labels, strict=True)]
    network = distributed_model(model, device) if world > 1 else model
    optimizer = torch.optim.SGD(
        model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4, fused=device.type == "cuda"
    )
    amp = run.precision
    scaler = grad_scaler(device, amp)

    def forward(_) -> None:
        with autocast(device, amp):
            model(images, targets)

    estimate_batchnorm_statistics(model, range(BATCHNORM_PASSES), forward)

    def train_step():
        model.train()
        with autocast(device, amp):
            losses = network(images, targets)
        loss = sum(losses.values())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    @torch.no_grad()
    def infer_step():
        model.eval()
        with autocast(device, amp):
            model(images)

    return train_step, infer_step


def levers(recipe: dict) -> dict:
    """The recipe's speed keys, as a report row records them."""
    return {
        "channels_last": flag(recipe["channels_last"], "channels_last"),
        "compile": flag(recipe["compile"], "compile"),
        "compile_mode": recipe["compile_mode"],
        "fused_optimizer": flag(recipe["optimizer"]["fused"], "optimizer.fused"),
    }


def recipe_with(a, overrides: list[str]) -> dict:
    """The recipe of --recipe, --set, --amp and --batch-size, then ``overrides`` (KEY=VALUE items)."""
    return zoo.cli.recipe_from_args(argparse.Namespace(**{**vars(a), "set": [*a.set, *overrides]}))


def run(a) -> list[dict]:
    import torch
    from zoo.bench import measure

    recipe = recipe_with(a, [])
    env, device = init_distributed(a.device)
    world = env.world_size
    fast_math(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    modes = ("train", "inference") if a.mode == "both" else (a.mode,)
    names = [m for m in a.models.split(",") if m]
    for m in names:
        if m not in MODELS:
            raise UserError(f"unknown model '{m}' in --models (choose from {', '.join(MODELS)})")
    runs = []  # (model, its variant's overrides, its recipe): every recipe checked before any work
    for name in names:
        runs.append((name, [], recipe))
        if name == "ours":
            variants = [[item for item in v.split(",") if item] for v in a.variant]
            runs += [(name, variant, recipe_with(a, variant)) for variant in variants]
    results = []
    for name, variant, measured in runs:
        run_section = run_config(measured)
        batch_size = run_section.batch_per_gpu * (run_section.accumulation if name == "ours" else 1)
        if name == "ours":
            train_step, infer_step = ours_steps(measured, a, device, world)
        else:
            train_step, infer_step = baseline_steps(name, measured, a, device, world)
        for mode in modes:
            if mode == "inference" and world > 1:
                continue  # inference is per GPU; measure it with one process
            if mode == "train":  # the host queues steps ahead of the device, as in train.py
                s = measure(
                    train_step,
                    items_per_call=batch_size,
                    warmup=a.warmup,
                    iters=a.iters,
                    windows=a.windows,
                    sync=sync,
                )
            else:  # per_call: a batch's latency too (synchronised around every call)
                s = measure(
                    infer_step,
                    items_per_call=batch_size,
                    warmup=a.warmup,
                    iters=a.iters,
                    sync=sync,
                    per_call=True,
                )
            s["throughput"] *= world  # global images/s (every rank runs the same step in lock-step)
            row = {
                "model": name,
                "mode": mode,
                "batch_size": batch_size,
                "world_size": world,
                "amp": run_section.precision,
            }
            if name == "ours":
                row.update(recipe=str(a.recipe), overrides=[*a.set, *variant], variant=",".join(variant))
                row.update(levers(measured))
            results.append({**row, **s})
            if env.rank == 0:
                label = f"{name} {','.join(variant)}".strip()
                print(f"{label:40s} {mode:9s} {s['throughput']:9.1f} img/s", file=sys.stderr, flush=True)
        del train_step, infer_step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    add_ratios(results)
    if env.rank == 0:
        print(format_table(results))
    close_distributed()
    return results if env.rank == 0 else []


def add_ratios(results: list[dict]) -> None:
    """``speedup_vs_<baseline>`` on each "ours" row: its images/s over the baseline's, same mode."""
    from ssd.baselines import BASELINES

    for row in results:
        if row["model"] != "ours":
            continue
        for other in results:
            if other["model"] in BASELINES and other["mode"] == row["mode"]:
                row[f"speedup_vs_{other['model']}"] = row["throughput"] / other["throughput"]


def format_table(results: list[dict]) -> str:
    """One line per row: model, mode, batch x processes, precision, img/s, p50 ms, ratios, levers."""
    from ssd.baselines import BASELINES

    lines = [
        f"{'model':16s} {'mode':9s} {'batch':>9s} {'amp':4s} {'img/s':>9s} {'p50 ms':>8s}  "
        "vs torchvision-ssd  vs ssd300_vgg16  settings"
    ]
    for r in results:
        p50 = r.get("latency_ms", {}).get("p50")
        ratios = [r.get(f"speedup_vs_{b}") for b in BASELINES]
        settings = (
            f"channels_last={r['channels_last']} compile={r['compile']} mode={r['compile_mode']} "
            f"fused={r['fused_optimizer']}"
            if r["model"] == "ours"
            else "eager, autocast"
        )
        lines.append(
            f"{r['model']:16s} {r['mode']:9s} {r['batch_size']:>5d} x {r['world_size']:<1d} {r['amp']:4s} "
            f"{r['throughput']:9.1f} {p50 if p50 is not None else float('nan'):8.1f}  "
            + "  ".join(f"{(f'{x:.2f}x' if x else '-'):>16s}" for x in ratios)
            + f"  {settings.strip()}"
        )
    return "\n".join(lines)


@entry_point
def main(argv=None) -> None:
    if zoo.scaling.asked_for(argv):
        zoo.scaling.main(argv, module="ssd.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE)
        return
    a = parse_args(argv)
    results = run(a)
    if a.output and results:
        report_benchmark(a.output, results, a.device)


if __name__ == "__main__":
    main()
