"""Training and inference images/s of our RetinaNet (a recipe) next to torchvision's ``RetinaNet`` class
with the same backbone, heads, weights and image size, trained as torchvision's detection reference does
(eager, autocast), on the same device and synthetic batch, in the same run.

    python -m retinanet.benchmark --amp bf16 --batch-size 16 --output bench.json
    python -m retinanet.benchmark --models ours --variant compile=true        # and a row with one lever set
    python -m retinanet.benchmark --gpus 1,2,4                                  # scaling (zoo.scaling)
    python -m retinanet.benchmark --smoke --device cpu --recipe configs/digits_cpu.yaml   # checks the path

"ours" is built from --recipe and --set with the training step train.py runs (retinanet.step.TrainStep:
forward, batched matching and losses on the device, backward, Adam, warm-up) and, for inference, the
detection evaluation runs (retinanet.model.detect: candidates decoded on the device, then batched NMS).
torchvision's model gets a copy of our weights and the same images (as [0, 1] images it normalises
itself), and its own per-image matching, loss and post-processing. Inference is measured on
trained-looking scores: the classification bias is set so that about CANDIDATES (anchor, class) pairs
of each image clear the score threshold, as a trained model's do, instead of random weights whose
boxes all pass (NMS dominates) or none (nothing to do).

``--gpus 1,2,4`` is the scaling mode every PyTorch model shares (zoo.scaling): the recipe's training
step (:func:`scaling_step`) on 1, 2 and 4 GPUs through train.sh's launcher.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from typing import TYPE_CHECKING

import zoo.cli
import zoo.scaling
from zoo.cli import entry_point
from zoo.coco import report_benchmark
from zoo.errors import UserError
from zoo.recipe import flag, run_config
from zoo.torch import amp_dtype, autocast, close_distributed, fast_math, grad_scaler, init_distributed

from retinanet import DEFAULT_RECIPE

if TYPE_CHECKING:
    import torch

    from retinanet.model import RetinaNet

MODELS = ("ours", "torchvision")
# (anchor, class) pairs of an image above the score threshold for inference: about what a trained
# detector hands to NMS.
CANDIDATES = 1000


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m retinanet.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                   help="also measure ours with these recipe overrides on top of --set (one row each)")  # fmt: skip
    p.add_argument("--mode", choices=("train", "inference", "both"), default="both")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of: {', '.join(MODELS)}")
    p.add_argument("--batch-size", type=int, help="per process (recipe: run.batch_per_gpu)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compiling happens here)")
    p.add_argument("--iters", type=int, default=20, help="timed steps per window")
    p.add_argument("--windows", type=int, default=3, help="the median window's images/s")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK where CUDA is)")
    p.add_argument("--num-classes", type=int, help="default: the recipe's data.synthetic_classes")
    p.add_argument("--output", help="JSON report (zoo.bench/v1)")
    p.add_argument("--smoke", action="store_true", help="batch 2, 1 warm-up, 2 iterations, no compiling")
    a = zoo.cli.parse_args(p, argv)
    if a.smoke:
        a.batch_size, a.warmup, a.iters, a.windows = 2, 1, 2, 1
        a.set = [*a.set, "compile=false"]
    return a


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The recipe's training step (DDP-wrapped for several processes) on synthetic batches: zoo.scaling's step."""
    from retinanet.data import SyntheticLoader
    from retinanet.step import TrainStep

    run = run_config(recipe)
    images = run.batch_per_gpu * run.accumulation
    d = recipe["data"]
    step = TrainStep(
        recipe, device, steps_per_epoch=1000, num_classes=d["synthetic_classes"], world_size=world_size
    )
    loader = SyntheticLoader(images, 4, num_classes=d["synthetic_classes"], image_size=d["image_size"],
                             device=device, variants=4)  # fmt: skip
    batches = itertools.cycle(loader.batches)
    step.train()

    def call():
        batch = next(batches)
        return step(batch.images, batch.boxes, batch.labels)

    return zoo.scaling.Step(call, items=images, unit="img/s", model=step.model)


def calibrate_scores(model: RetinaNet, images: torch.Tensor, candidates: int = CANDIDATES) -> None:
    """Shift the classification bias so that about ``candidates`` (anchor, class) pairs of each image
    score above the model's threshold (trained-looking post-processing work)."""
    import torch

    with torch.no_grad():
        logits, _ = model(images)
        kth = logits.float().flatten(1).topk(candidates, dim=1).values[:, -1].mean()
        threshold = torch.logit(torch.tensor(model.settings["score_threshold"]))
        model.head.classification_head.cls_logits.bias += threshold - kth


def torchvision_model(model: RetinaNet, image_size: int):
    """torchvision's RetinaNet class over a copy of ``model``'s backbone and heads (same weights), its
    transform fixed to ``image_size`` (no resize work), post-processing with our settings."""
    from torchvision.models.detection import RetinaNet as TorchvisionRetinaNet

    s = model.settings
    return TorchvisionRetinaNet(
        copy.deepcopy(model.backbone), model.num_classes, min_size=image_size, max_size=image_size,
        head=copy.deepcopy(model.head), score_thresh=s["score_threshold"], nms_thresh=s["nms_threshold"],
        detections_per_img=s["max_detections"], topk_candidates=s["candidates_per_level"],
    )  # fmt: skip


def build_steps(name: str, recipe: dict, a, device, world: int):
    """(train_step, infer_step) of one model on the recipe's synthetic batch."""
    import torch

    from retinanet.data import SyntheticLoader
    from retinanet.model import MEAN, STD, detect
    from retinanet.step import TrainStep

    run, d = run_config(recipe), recipe["data"]
    classes = a.num_classes or d["synthetic_classes"]
    batch = SyntheticLoader(run.batch_per_gpu * run.accumulation, 1, num_classes=classes,
                            image_size=d["image_size"], device=device).batches[0]  # fmt: skip
    step = TrainStep(recipe, device, steps_per_epoch=1000, num_classes=classes, world_size=world)
    inference = copy.deepcopy(step.model).eval()
    calibrate_scores(inference, batch.images)
    if name == "ours":
        step.train()

        def ours_infer():
            detect(inference, batch.images, amp_dtype=amp_dtype(run.precision))

        return lambda: step(batch.images, batch.boxes, batch.labels), ours_infer
    model = torchvision_model(step.model, d["image_size"]).to(device)
    tv_infer_model = torchvision_model(inference, d["image_size"]).to(device).eval()
    mean, std = (
        torch.tensor(MEAN, device=device)[:, None, None],
        torch.tensor(STD, device=device)[:, None, None],
    )
    images = list(batch.images * std + mean)
    targets = [
        {"boxes": b[lab >= 0], "labels": lab[lab >= 0]}
        for b, lab in zip(batch.boxes, batch.labels, strict=True)
    ]
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    scaler = grad_scaler(device, run.precision)

    def tv_train():
        model.train()
        with autocast(device, run.precision):
            loss = sum(model(images, targets).values())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    def tv_infer():
        import torch

        with torch.no_grad():
            with autocast(device, run.precision):
                tv_infer_model(images)

    return tv_train, tv_infer


def recipe_with(a, overrides: list[str]) -> dict:
    """The recipe of --recipe, --set, --amp and --batch-size, then ``overrides`` (KEY=VALUE items)."""
    return zoo.cli.recipe_from_args(argparse.Namespace(**{**vars(a), "set": [*a.set, *overrides]}))


def run(a) -> list[dict]:
    import torch
    from zoo.bench import measure

    env, device = init_distributed(a.device)
    fast_math(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    modes = ("train", "inference") if a.mode == "both" else (a.mode,)
    names = [m for m in a.models.split(",") if m]
    for name in names:
        if name not in MODELS:
            raise UserError(f"unknown model '{name}' in --models (choose from {', '.join(MODELS)})")
    runs = [(name, []) for name in names]
    runs += [("ours", [item for item in v.split(",") if item]) for v in a.variant]
    recipes = [recipe_with(a, variant) for _, variant in runs]  # every recipe checked before any work
    results = []
    for (name, variant), recipe in zip(runs, recipes, strict=True):
        run_section = run_config(recipe)
        batch_size = run_section.batch_per_gpu * run_section.accumulation
        train_step, infer_step = build_steps(name, recipe, a, device, env.world_size)
        for mode in modes:
            if mode == "inference" and env.world_size > 1:
                continue  # inference is per GPU; measure it with one process
            settings = {"items_per_call": batch_size, "warmup": a.warmup, "iters": a.iters, "sync": sync}
            if mode == "train":
                s = measure(train_step, windows=a.windows, **settings)
            else:
                s = measure(infer_step, per_call=True, **settings)
            s["throughput"] *= env.world_size
            row = {"model": name, "mode": mode, "batch_size": batch_size, "world_size": env.world_size,
                   "amp": run_section.precision, "image_size": recipe["data"]["image_size"],
                   "backbone": recipe["model"]["backbone"]}  # fmt: skip
            if name == "ours":
                row.update(recipe=str(a.recipe), overrides=[*a.set, *variant], variant=",".join(variant))
                row.update(levers(recipe))
            results.append({**row, **s})
            if env.rank == 0:
                label = f"{name} {','.join(variant)}".strip()
                print(f"{label:40s} {mode:9s} {s['throughput']:9.1f} img/s", file=sys.stderr, flush=True)
        del train_step, infer_step
    for row in results:
        for other in results:
            if row["model"] == "ours" and other["model"] == "torchvision" and other["mode"] == row["mode"]:
                row["speedup_vs_torchvision"] = row["throughput"] / other["throughput"]
    if env.rank == 0:
        print(format_table(results))
    close_distributed()
    return results if env.rank == 0 else []


def levers(recipe: dict) -> dict:
    """The recipe's speed keys, as a report row records them."""
    return {
        "channels_last": flag(recipe["channels_last"], "channels_last"),
        "compile": flag(recipe["compile"], "compile"),
        "compile_mode": recipe["compile_mode"],
        "fused_optimizer": flag(recipe["optimizer"]["fused"], "optimizer.fused"),
    }


def format_table(results: list[dict]) -> str:
    """One line per row: model, mode, batch x processes, precision, image size, img/s, p50 ms, ratio."""
    lines = [
        f"{'model':12s} {'mode':9s} {'batch':>9s} {'amp':4s} {'size':>5s} {'img/s':>9s} {'p50 ms':>8s}  vs torchvision"
    ]
    for r in results:
        p50 = r.get("latency_ms", {}).get("p50", float("nan"))
        ratio = r.get("speedup_vs_torchvision")
        lines.append(
            f"{r['model']:12s} {r['mode']:9s} {r['batch_size']:>5d} x {r['world_size']:<1d} {r['amp']:4s} "
            f"{r['image_size']:>5d} {r['throughput']:9.1f} {p50:8.1f}  {f'{ratio:.2f}x' if ratio else '-'}"
        )
    return "\n".join(lines)


@entry_point
def main(argv=None) -> None:
    if zoo.scaling.asked_for(argv):
        zoo.scaling.main(
            argv, module="retinanet.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE
        )
        return
    a = parse_args(argv)
    results = run(a)
    if a.output and results:
        report_benchmark(a.output, results, a.device)


if __name__ == "__main__":
    main()
