"""Training and inference images/s of our EfficientNet recipe next to timm's same model
(``efficientnet_b0`` / ``efficientnet_b4``, compiled), in one process on the same device and the same
synthetic batch; and the scaling of the recipe's training step over GPU counts.

    python -m efficientnet.benchmark --mode train                                   # ours vs timm
    python -m efficientnet.benchmark --mode train --recipe configs/efficientnet_b4_8gpu.yaml
    python -m efficientnet.benchmark --mode inference --amp fp16 --models timm-eager,timm-compile,ours
    python -m efficientnet.benchmark --gpus 1,2,4 --recipe configs/efficientnet_b0_8gpu.yaml   # scaling (zoo.scaling)

"ours" is a recipe (``--recipe``, default the B0 recipe, with ``--set``, ``--amp`` and
``--batch-size`` overrides): training times ``efficientnet.step.TrainStep``, the step ``train.py`` runs;
inference times ``zoo.classification.inference.inference_model`` (BatchNorm folded, weights in ``--amp``), the
model ``evaluate.py`` scores and ``export.py`` writes, compiled with the recipe's ``train.compile``.
The baselines are timm's model of the recipe's variant used as a user would: ``timm-eager`` (autocast,
channels_last, the recipe's optimizer, label-smoothed loss) and ``timm-compile`` (the same with
``torch.compile``); the issue's targets are ours >= 1.3x timm-compile training and >= 1.5x inference. With ``--data-dir``, ours trains on
the recipe's input pipeline (``data.backend``) and ``loader`` times that pipeline alone.

``--gpus 1,2,4`` is the scaling mode every PyTorch model shares (``zoo.scaling``): the same step on
synthetic batches of ``run.batch_per_gpu``, launched through ``train.sh``'s launcher once per GPU
count, with ``--window-seconds``, ``--windows`` and ``--warmup``; ``--gpus --help`` lists its flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import platform
import sys
import time
from typing import TYPE_CHECKING

import zoo.cli
import zoo.scaling
from zoo.bench import format_profile, measure, profile_step, write_report
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.recipe import run_config
from zoo.torch import amp_dtype, autocast, fast_math, grad_scaler, seed_everything

from efficientnet import DEFAULT_RECIPE

if TYPE_CHECKING:
    import torch.nn as nn

    from efficientnet.step import TrainStep

MODELS = ("timm-eager", "timm-compile", "ours", "loader")
# Kernel families of an EfficientNet step for --profile; first match wins.
KERNEL_FAMILIES = (
    ("triton (fused pointwise/reductions)", ("triton",)),
    ("convolution (cuDNN)", ("conv", "xmma", "cudnn", "sm90", "implicit", "wgrad", "dgrad", "fprop")),
    ("matmul", ("gemm", "cublas", "cutlass", "nvjet")),
    ("JPEG decode (nvJPEG)", ("jpeg", "huffman", "idct", "dct")),
    ("crop + resize (roi_align)", ("roi",)),
    ("NCCL (all-reduce)", ("nccl",)),
    ("memcpy/memset", ("memcpy", "memset")),
)
# Different synthetic batches the scaling mode cycles through (one batch alone can flatter caches).
SCALING_BATCHES = 4


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmark.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    p.add_argument(
        "--data-dir", help="image folder: ours trains on the recipe's input pipeline (default: synthetic)"
    )
    p.add_argument("--mode", choices=("train", "inference", "both"), default="both")
    p.add_argument(
        "--models", default="timm-eager,timm-compile,ours", help=f"comma list of {', '.join(MODELS)}"
    )
    p.add_argument("--batch-size", type=int, default=None, help="images per GPU (run.batch_per_gpu)")
    p.add_argument(
        "--warmup", type=int, default=20, help="steps before timing, after the first (compiling) one"
    )
    p.add_argument("--iters", type=int, default=50, help="steps in each timed window")
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    p.add_argument("--latency-iters", type=int, default=200, help="batch-1 inference calls timed (0: none)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where a GPU is visible)")
    p.add_argument(
        "--profile", action="store_true", help="print GPU time per kernel family of each train step"
    )
    p.add_argument(
        "--trace", metavar="DIR", help="with --profile: DIR/<model>.json.gz timelines (Chrome trace)"
    )
    p.add_argument("--output", metavar="FILE", help="write the report here as JSON (zoo.bench schema)")
    p.add_argument("--make-jpegs", type=int, metavar="N", default=0,
                   help="first write N generated 500x375 JPEGs into --data-dir (4x as many training samples)")  # fmt: skip
    p.add_argument(
        "--gpus", metavar="N[,N...]", help="the scaling mode (zoo.scaling): see benchmark.sh --gpus 1 --help"
    )
    args = zoo.cli.parse_args(p, argv, renamed={"--json": "--output", "--variants": "--models"})
    import torch  # after parsing: --help and a bad flag answer without loading the framework

    from efficientnet.step import recipe_levers

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(MODELS)}")
    args.models = models
    if args.make_jpegs and not args.data_dir:
        p.error("--make-jpegs needs --data-dir")
    if "loader" in models and not args.data_dir:
        p.error("--models loader times the input pipeline: give --data-dir")
    if args.trace and not args.profile:
        p.error("--trace needs --profile")
    args.recipe_dict = zoo.cli.recipe_from_args(args)
    recipe_levers(args.recipe_dict)  # a misspelt lever is a one-line error before anything runs
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
    return args


# ------------------------------------------------------------------------------------ the scaling mode
def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The recipe's training step (DDP-wrapped and compiled as train.py builds it) on a few synthetic
    batches of one optimizer step each, different on every rank."""
    import torch.distributed as dist
    from zoo.imagenet_loaders import DataConfig, SyntheticLoader

    from efficientnet.step import accumulation, build_train_step, global_batch

    step = build_train_step(recipe, device, world_size=world_size)
    rank = dist.get_rank() if dist.is_initialized() else 0
    data = DataConfig.from_recipe(
        recipe, device, accumulation=accumulation(recipe, world_size), world_size=world_size
    )
    batches = []
    for index in range(SCALING_BATCHES):
        loader = SyntheticLoader(dataclasses.replace(data, seed=data.seed + 1000 * rank + index))
        batches.append((loader.images, loader.labels))
    cycle = itertools.cycle(batches)
    return zoo.scaling.Step(
        lambda: step(*next(cycle)),
        items=global_batch(recipe, world_size) // world_size,
        unit="img/s",
        model=step.model,
    )


# ------------------------------------------------------------------------------------ ours vs timm
def input_batches(args, device):
    """Endless (images, labels) on the device: the synthetic batch, or the recipe's pipeline on --data-dir."""
    from zoo.imagenet_loaders import DataConfig, build_loader, check_layout

    from efficientnet.step import accumulation

    recipe = args.recipe_dict
    data = DataConfig.from_recipe(
        recipe, device, accumulation=accumulation(recipe, 1), data_dir=args.data_dir
    )
    if not args.data_dir:
        loader = build_loader(dataclasses.replace(data, backend="synthetic"), "train")
        while True:
            yield loader.images, loader.labels
    classes = check_layout(args.data_dir, data.num_classes, splits=("train",))
    loader, epoch = build_loader(data, "train", classes), 0
    while True:
        yield from loader.epoch(epoch)
        epoch += 1


def ours_train_step(recipe: dict, device) -> TrainStep:
    """The training step train.py builds from the same recipe."""
    from efficientnet.step import build_train_step

    return build_train_step(recipe, device)


def timm_model(recipe: dict) -> nn.Module:
    """timm's EfficientNet of the recipe's variant (its width where the recipe overrides it), with the
    recipe's classes, dropout and stochastic depth."""
    import timm

    from efficientnet.model import VARIANTS

    model_cfg = recipe["model"]
    variant, kwargs = str(model_cfg["variant"]), {}
    if model_cfg["width"] is not None:  # a tiny CPU model: timm's generator with the same multipliers
        from timm.models.efficientnet import _gen_efficientnet

        return _gen_efficientnet(
            f"efficientnet_{variant}", channel_multiplier=float(model_cfg["width"]),
            depth_multiplier=VARIANTS[variant].depth, pretrained=False,
            num_classes=int(model_cfg["num_classes"]), drop_path_rate=float(model_cfg["drop_path_rate"]),
        )  # fmt: skip
    if model_cfg["dropout"] is not None:
        kwargs["drop_rate"] = float(model_cfg["dropout"])
    return timm.create_model(
        f"efficientnet_{variant}", pretrained=False, num_classes=int(model_cfg["num_classes"]),
        drop_path_rate=float(model_cfg["drop_path_rate"]), **kwargs,
    )  # fmt: skip


def timm_train_step(name: str, recipe: dict, device):
    """timm's model as a user writes it: autocast, channels_last, the recipe's optimizer and
    label-smoothed loss, compiled for timm-compile."""
    import torch
    import torch.nn as nn

    from efficientnet.step import build_optimizer, peak_learning_rate

    torch.backends.cudnn.benchmark = False
    model = timm_model(recipe).to(device, memory_format=torch.channels_last).train()
    optimizer = build_optimizer(recipe, model, peak_learning_rate(recipe, 1), fused=False)
    precision = run_config(recipe).precision
    scaler = grad_scaler(device, precision)
    criterion = nn.CrossEntropyLoss(label_smoothing=float(recipe["train"]["label_smoothing"]))
    forward = torch.compile(model) if name == "timm-compile" else model

    def step(images, labels):
        images = images.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = criterion(forward(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def levers(name: str, recipe: dict) -> dict:
    """What each row ran with: the recipe's levers for ours, timm's fixed ones for the baselines."""
    from efficientnet.step import recipe_levers

    if name.startswith("timm-"):
        compiled = "default" if name == "timm-compile" else None
        return {"precision": run_config(recipe).precision, "compile": compiled, "channels_last": True,
                "fused_optimizer": False, "cudnn_benchmark": False, "fold_bn": False}  # fmt: skip
    return {**recipe_levers(recipe), "fold_bn": True}


def timed(step, args, device, items: int, per_call: bool = False) -> dict:
    """The first call's seconds, then zoo.bench.measure."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else None
    started = time.perf_counter()
    step()
    if sync:
        sync()
    first_step_s = time.perf_counter() - started
    result = measure(step, items_per_call=items, warmup=args.warmup, iters=args.iters,
                     windows=args.windows, sync=sync, per_call=per_call)  # fmt: skip
    rates = [items * args.iters / s for s in result["window_seconds"]]
    return {"images_per_s": sorted(rates)[len(rates) // 2], "images_per_s_windows": rates,
            "first_step_s": first_step_s, **({"latency_ms": result["latency_ms"]} if per_call else {})}  # fmt: skip


def bench_train(name: str, args, device) -> dict:
    import torch

    from efficientnet.step import global_batch

    recipe = args.recipe_dict
    seed_everything(run_config(recipe).seed)
    batches = input_batches(args, device)
    if name == "loader":
        train_step = None
    elif name == "ours":
        train_step = ours_train_step(recipe, device)
    else:
        train_step = timm_train_step(name, recipe, device)

    def step():
        images, labels = next(batches)
        if train_step is not None:
            train_step(images, labels)

    row = timed(step, args, device, global_batch(recipe, 1))
    if args.profile and device.type == "cuda":
        trace = os.path.join(args.trace, f"{name}.json.gz") if args.trace else None
        profile = profile_step(step, torch.cuda.synchronize, families=KERNEL_FAMILIES, trace_path=trace)
        print(f"profile of {name}, per step:\n{format_profile(profile)}", file=sys.stderr, flush=True)
    batches.close()
    return {**row, "input": recipe["data"]["backend"] if args.data_dir else "synthetic"}


def bench_inference(name: str, args, device) -> dict:
    import torch
    from zoo.classification.inference import inference_model

    from efficientnet.step import build_model, recipe_levers

    recipe = args.recipe_dict
    run = run_config(recipe)
    seed_everything(run.seed)
    batch, size = run.batch_per_gpu, int(recipe["data"]["image_size"])
    levers_used = recipe_levers(recipe)
    if name == "ours":
        model = inference_model(build_model(recipe), amp=run.precision, device=device,
                                channels_last=levers_used["channels_last"])  # fmt: skip
        mode, dtype, memory_format = levers_used["compile"], torch.float32, torch.contiguous_format
        torch.backends.cudnn.benchmark = levers_used["cudnn_benchmark"]
    else:
        torch.backends.cudnn.benchmark = False
        dtype, memory_format = amp_dtype(run.precision) or torch.float32, torch.channels_last
        model = timm_model(recipe).eval()
        model = model.to(device, memory_format=memory_format).to(dtype)  # weights in half outright
        mode = "default" if name == "timm-compile" else None
    forward = torch.compile(model, mode=mode) if mode else model
    row = {}
    for size_of_batch in [batch] + ([1] if args.latency_iters else []):
        images = torch.randn(size_of_batch, 3, size, size, device=device, dtype=dtype)
        images = images.contiguous(memory_format=memory_format)

        @torch.inference_mode()
        def step(images=images):
            return forward(images)

        if size_of_batch == batch:
            row.update(timed(step, args, device, batch))
        else:
            latency_args = argparse.Namespace(**{**vars(args), "iters": args.latency_iters, "windows": 1})
            row["latency_bs1_ms"] = timed(step, latency_args, device, 1, per_call=True)["latency_ms"]
    return {**row, "input": "synthetic"}


def run(args) -> list[dict]:
    import torch
    from zoo.imagenet_loaders import check_layout

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but no CUDA device is visible")
    device = torch.device(args.device)
    if args.make_jpegs:
        from zoo.imagenet_loaders.jpeg_set import make_jpeg_set

        info = make_jpeg_set(args.data_dir, unique=args.make_jpegs, samples=4 * args.make_jpegs)
        print(f"JPEG set {args.data_dir}: {info}", file=sys.stderr, flush=True)
    if args.data_dir:  # the models get the folder's classes
        args.recipe_dict["model"]["num_classes"] = len(check_layout(args.data_dir, splits=("train",)))
    precision, batch = run_config(args.recipe_dict).precision, run_config(args.recipe_dict).batch_per_gpu
    results = []
    for mode in ("train", "inference") if args.mode == "both" else (args.mode,):
        for name in args.models:
            if mode == "inference" and name == "loader":
                continue
            fast_math(device)
            row = bench_train(name, args, device) if mode == "train" else bench_inference(name, args, device)
            row = {"mode": mode, "model": name, "batch_size": batch, "precision": precision,
                   "levers": levers(name, args.recipe_dict), **row,
                   "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}  # fmt: skip
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "levers"}), file=sys.stderr, flush=True)
            torch._dynamo.reset()
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
    return results


def print_table(results: list[dict]) -> None:
    """One row per run, with its ratio to timm-compile of the same call (the issue's baseline)."""
    print(f"{'mode':<10} {'model':<12} {'batch':>5} {'precision':<9} {'img/s':>10} {'vs timm':>7}  extra")
    for r in results:
        reference = "timm-compile"
        base = next((b for b in results if (b["mode"], b["model"]) == (r["mode"], reference)), None)
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
        extra = f"first step {r['first_step_s']:.0f} s"
        if "latency_bs1_ms" in r:
            extra += f", bs1 p50 {r['latency_bs1_ms']['p50']:.2f} ms p99 {r['latency_bs1_ms']['p99']:.2f} ms"
        print(f"{r['mode']:<10} {r['model']:<12} {r['batch_size']:>5} {r['precision']:<9} "
              f"{r['images_per_s']:>10.0f} {ratio:>7}  {extra}")  # fmt: skip


@entry_point
def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if zoo.scaling.asked_for(argv):
        zoo.scaling.main(
            argv, module="efficientnet.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE
        )
        return
    args = parse_args(argv)

    import torch

    results = run(args)
    print_table(results)
    if args.output:
        device = (
            torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({platform.machine()})"
        )
        write_report(args.output, results, model="efficientnet", framework="pytorch", torch=torch.__version__,
                     device=device, recipe=args.recipe_dict, command=" ".join(["benchmark.sh", *argv]))  # fmt: skip


if __name__ == "__main__":
    main()
