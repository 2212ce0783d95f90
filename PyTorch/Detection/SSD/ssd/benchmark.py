"""Training and inference images/s of our SSD300 next to torchvision's ``ssd300_vgg16`` (weights=None),
in one call on the same device with the same synthetic batch (300x300 images, 8 boxes per image).

    python -m ssd.benchmark --mode both --batch-size 64 --amp bf16 --output bench.json
    torchrun --nproc_per_node 4 -m ssd.benchmark --mode train     # DDP scaling (global images/s)
    python -m ssd.benchmark --smoke --device cpu                   # seconds on a CPU: checks the path

Train steps include target matching, loss, backward and an SGD step; inference includes decoding
and per-class NMS (torchvision's model does its own resize/normalise, matching and NMS inside).
"""

from __future__ import annotations

import argparse
import platform
import sys

import torch
from zoo.cli import AMP_CHOICES
from zoo.cli import parse_args as parse_cli
from zoo.torch import (
    autocast,
    close_distributed,
    distributed_model,
    fast_math,
    grad_scaler,
    init_distributed,
)

from ssd.boxes import default_boxes, match, postprocess
from ssd.loss import SSDLoss
from ssd.model import SSD300

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ssd.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--mode", choices=("train", "inference", "both"), default="both")
    p.add_argument("--models", default="ours,torchvision", help="comma list of: ours, torchvision")
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--amp", choices=AMP_CHOICES, default="bf16", help="mixed precision (fp32: no autocast)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--compile", action="store_true", help="torch.compile both models' forward")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK where CUDA is)")
    p.add_argument(
        "--num-classes", type=int, default=81, help="ours; torchvision's gets num_classes + 10 (91)"
    )
    p.add_argument("--output", help="JSON report (zoo.bench/v1)")
    p.add_argument("--smoke", action="store_true", help="batch 2, 1 warm-up, 2 iterations")
    a = parse_cli(p, argv)
    if a.smoke:
        a.batch_size, a.warmup, a.iters = 2, 1, 2
    return a


def synthetic_batch(batch: int, num_classes: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    images01 = torch.rand(batch, 3, 300, 300, generator=g)
    xy = torch.rand(batch, 8, 2, generator=g) * 0.7
    boxes = torch.cat([xy, xy + 0.05 + torch.rand(batch, 8, 2, generator=g) * 0.25], -1)
    labels = torch.randint(1, num_classes, (batch, 8), generator=g)
    return images01.to(device), boxes.to(device), labels.to(device)


def wrap_ddp(model, device, world):
    """DistributedDataParallel (zoo.torch's) when several processes run, else the model itself."""
    return distributed_model(model, device) if world > 1 else model


def ours_steps(a, device, world):
    """(train_step, infer_step) closures for our SSD300."""
    model = SSD300(num_classes=a.num_classes).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    images01, boxes, labels = synthetic_batch(a.batch_size, a.num_classes, device)
    images = ((images01 - MEAN.to(device)) / STD.to(device)).contiguous(
        memory_format=torch.channels_last if a.channels_last else torch.contiguous_format
    )
    dboxes = default_boxes().to(device)
    criterion = SSDLoss()
    train_model = wrap_ddp(model, device, world)
    fwd_train = torch.compile(train_model) if a.compile else train_model
    fwd_eval = torch.compile(model) if a.compile else model
    opt = torch.optim.SGD(
        model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4, fused=device.type == "cuda"
    )
    scaler = grad_scaler(device, a.amp)

    def train_step():
        model.train()
        with torch.no_grad():
            loc_t, cls_t = match(boxes, labels, dboxes)
        with autocast(device, a.amp):
            loc, logits = fwd_train(images)
        loss = criterion(loc, logits, loc_t, cls_t)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    @torch.no_grad()
    def infer_step():
        model.eval()
        with autocast(device, a.amp):
            loc, logits = fwd_eval(images)
        postprocess(loc, logits, dboxes)

    return train_step, infer_step


def torchvision_steps(a, device, world):
    """(train_step, infer_step) closures for torchvision's ssd300_vgg16, used as a user would."""
    from torchvision.models.detection import ssd300_vgg16

    model = ssd300_vgg16(weights=None, weights_backbone=None, num_classes=a.num_classes + 10).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    images01, boxes, labels = synthetic_batch(a.batch_size, a.num_classes, device)
    image_list = list(images01)
    targets = [{"boxes": b * 300, "labels": lab} for b, lab in zip(boxes, labels, strict=True)]
    train_model = wrap_ddp(model, device, world)
    fwd_train = torch.compile(train_model) if a.compile else train_model
    fwd_eval = torch.compile(model) if a.compile else model
    opt = torch.optim.SGD(
        model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4, fused=device.type == "cuda"
    )
    scaler = grad_scaler(device, a.amp)

    def train_step():
        model.train()
        with autocast(device, a.amp):
            losses = fwd_train(image_list, targets)
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    @torch.no_grad()
    def infer_step():
        model.eval()
        with autocast(device, a.amp):
            fwd_eval(image_list)

    return train_step, infer_step


def run(a) -> list[dict]:
    from zoo.bench import measure

    env, device = init_distributed(a.device)
    world = env.world_size
    fast_math(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    modes = ("train", "inference") if a.mode == "both" else (a.mode,)
    builders = {"ours": ours_steps, "torchvision": torchvision_steps}
    names = [m for m in a.models.split(",") if m]
    for m in names:
        if m not in builders:
            raise SystemExit(f"unknown model '{m}' in --models (choose from {', '.join(builders)})")
    results = []
    for name in names:
        train_step, infer_step = builders[name](a, device, world)
        for mode in modes:
            if mode == "inference" and world > 1:
                continue  # inference is per GPU; measure it with one process
            fn = train_step if mode == "train" else infer_step
            # per_call: a step's latency as well (synchronised around every step)
            s = measure(
                fn, items_per_call=a.batch_size, warmup=a.warmup, iters=a.iters, sync=sync, per_call=True
            )
            s["throughput"] *= world  # global images/s (every rank runs the same step in lock-step)
            results.append(
                {
                    "model": name,
                    "mode": mode,
                    "batch_size": a.batch_size,
                    "world_size": world,
                    "amp": a.amp,
                    "channels_last": a.channels_last,
                    "compile": a.compile,
                    **s,
                }
            )
            if env.rank == 0:
                print(
                    f"{name:12s} {mode:9s} batch {a.batch_size} x {world}: {s['throughput']:.1f} img/s "
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
            if env.rank == 0:
                print(f"{mode}: ours / torchvision ssd300_vgg16 = {ratio:.2f}x", file=sys.stderr)
    close_distributed()
    return results if env.rank == 0 else []


def main(argv=None) -> None:
    a = parse_args(argv)
    results = run(a)
    if a.output and results:
        from zoo.bench import write_report

        on_gpu = torch.cuda.is_available() and (a.device or "cuda").startswith("cuda")
        device_name = torch.cuda.get_device_name() if on_gpu else platform.processor()
        write_report(a.output, results, device=device_name or "cpu", torch=torch.__version__)
        print(f"wrote {a.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
