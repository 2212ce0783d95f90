"""Training and inference throughput of our ResNet-50 recipe next to the torchvision baseline.

Both run in one process on the same device and the same synthetic batch, so their ratio is
measured under the same conditions. A "variant" is one set of speed levers; `--variants` picks
which to run, and the report lists each with its images/s and its ratio to the first
torchvision variant of the same mode.

    python -m resnet50.benchmark --mode train --variants tv-compile,ours --batch-size 256

Under torchrun (WORLD_SIZE > 1) each process trains on its own GPU through DistributedDataParallel
with the variant's DDP levers, and the report gives the images/s of all GPUs together.
``--gpus 1,2,4`` starts one torchrun per variant and GPU count and prints the scaling table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.distributed as dist
import torch.nn as nn
import zoo.cli
from zoo.bench import format_profile, inductor_options, measure, profile_step
from zoo.torch import (
    amp_dtype,
    autocast,
    distributed_model,
    fast_math,
    grad_scaler,
    init_distributed,
    parameter_groups,
    replicas_agree,
    seed_everything,
)


@dataclass(frozen=True)
class Variant:
    """One combination of speed levers."""

    name: str
    model: str = "ours"  # "ours" | "torchvision"
    precision: str = "bf16"  # "bf16" | "fp16" | "fp32" (tf32 matmul/conv)
    channels_last: bool = True
    compile_mode: str | None = "default"  # None: eager; else a torch.compile mode
    cudnn_benchmark: bool = True
    fused_optimizer: bool = True  # fused SGD kernel instead of the foreach default
    fold_bn: bool = True  # inference: BatchNorm folded into the preceding conv
    batch_size: int | None = None  # None: the --batch-size flag
    inductor: tuple[str, ...] = ()  # torch.compile(options=...) entries as "key=value"
    # "synthetic": one batch already on the device; else a resnet50.data backend reading --data-dir
    # ("gpu-decode", "gpu-decode-sync" = without the background prefetch thread, "pytorch", "dali-gpu")
    data: str = "synthetic"
    decode_batch: int = 0  # gpu-decode: images per decode call (0: the whole batch)
    prefetch_depth: int = 2  # gpu-decode: batches decoded ahead
    prefetch_priority: bool = True  # gpu-decode: crop/resize on a high-priority stream
    pin_encoded: bool = True  # gpu-decode: encoded bytes pinned by the loader before decoding
    fused_crop: bool = False  # gpu-decode: crop/resize/flip/normalise in one Triton kernel
    host_decode_share: float = 0.0  # gpu-decode: share of each batch the loader workers decode (PIL)
    side_stream: bool = False  # CUDA: train on a stream of our own instead of the legacy default stream
    # DistributedDataParallel, when several processes run (torchrun). torch.compile wraps the DDP model.
    ddp_bucket_mb: int = 25  # gradient bucket size: all-reduces overlap the rest of the backward
    ddp_static_graph: bool = True  # the reducer records the bucket order once, skips per-step checks
    ddp_bucket_view: bool = True  # .grad are views into the buckets: no copy in or out
    ddp_broadcast_buffers: bool = False  # True: rank 0's BatchNorm statistics are sent every forward
    ddp_comm: str = "fp32"  # "bf16": gradients all-reduced in bf16 (half the bytes)


# What plain DDP does: DistributedDataParallel(model) with its defaults.
PLAIN_DDP = {
    "ddp_static_graph": False,
    "ddp_bucket_view": False,
    "ddp_broadcast_buffers": True,
}

# The real input pipeline with crop, resize, flip and normalise in one Triton kernel.
FUSED_JPEG = {"data": "gpu-decode", "fused_crop": True}


TRAIN_VARIANTS = {
    # What a user writes in an afternoon: torchvision's model, autocast, channels_last, compile.
    "tv-eager": Variant(
        "tv-eager",
        "torchvision",
        compile_mode=None,
        cudnn_benchmark=False,
        fused_optimizer=False,
        **PLAIN_DDP,
    ),
    "tv-compile": Variant(
        "tv-compile", "torchvision", cudnn_benchmark=False, fused_optimizer=False, **PLAIN_DDP
    ),
    "tv-compile-cudnn": Variant("tv-compile-cudnn", "torchvision", fused_optimizer=False, **PLAIN_DDP),
    "ours-eager": Variant("ours-eager", compile_mode=None),
    "ours-bf16": Variant("ours-bf16"),
    "ours-fp16": Variant("ours-fp16", precision="fp16"),
    "ours-foreach": Variant("ours-foreach", fused_optimizer=False),
    "ours-autotune": Variant("ours-autotune", compile_mode="max-autotune-no-cudagraphs"),
    "ours-cudagraphs": Variant("ours-cudagraphs", compile_mode="reduce-overhead"),
    "ours-cdtune": Variant("ours-cdtune", inductor=("coordinate_descent_tuning=true",)),
    "ours-b384": Variant("ours-b384", compile_mode="reduce-overhead", batch_size=384),
    "ours-b512": Variant("ours-b512", compile_mode="reduce-overhead", batch_size=512),
    # Multi-GPU levers (they act only under torchrun / --gpus).
    "ours-ddp-plain": Variant("ours-ddp-plain", **PLAIN_DDP),
    "ours-ddp-bf16comm": Variant("ours-ddp-bf16comm", ddp_comm="bf16"),
    "ours-ddp-bucket100": Variant("ours-ddp-bucket100", ddp_bucket_mb=100),
    # The real input pipeline (JPEG decode, random-resized crop, flip, normalise) from --data-dir.
    "ours-jpeg": Variant("ours-jpeg", data="gpu-decode"),
    "ours-jpeg-sync": Variant("ours-jpeg-sync", data="gpu-decode-sync"),
    "ours-jpeg-chunk64": Variant("ours-jpeg-chunk64", data="gpu-decode", decode_batch=64),
    "ours-jpeg-depth4": Variant("ours-jpeg-depth4", data="gpu-decode", prefetch_depth=4),
    "ours-jpeg-lowprio": Variant("ours-jpeg-lowprio", data="gpu-decode", prefetch_priority=False),
    "ours-jpeg-pageable": Variant("ours-jpeg-pageable", data="gpu-decode", pin_encoded=False),
    "ours-jpeg-fused": Variant("ours-jpeg-fused", **FUSED_JPEG),
    # The loader workers decode and crop a share of each batch on the CPU; nvJPEG the rest.
    "ours-jpeg-fused-host25": Variant("ours-jpeg-fused-host25", **FUSED_JPEG, host_decode_share=0.25),
    "ours-jpeg-fused-host40": Variant("ours-jpeg-fused-host40", **FUSED_JPEG, host_decode_share=0.4),
    "ours-jpeg-fused-host60": Variant("ours-jpeg-fused-host60", **FUSED_JPEG, host_decode_share=0.6),
    "ours-bf16-stream": Variant("ours-bf16-stream", side_stream=True),
    "ours-jpeg-fused-stream": Variant("ours-jpeg-fused-stream", **FUSED_JPEG, side_stream=True),
    "ours-jpeg-fused-host40-stream": Variant(
        "ours-jpeg-fused-host40-stream", **FUSED_JPEG, host_decode_share=0.4, side_stream=True
    ),
    # CUDA graphs replay the step with almost no Python (the input threads get the GIL) but queue
    # it whole on the GPU, ahead of nvJPEG's per-image kernels (PERF.md).
    "ours-cudagraphs-jpeg-fused": Variant(
        "ours-cudagraphs-jpeg-fused", compile_mode="reduce-overhead", **FUSED_JPEG
    ),
    "ours-cudagraphs-jpeg-fused-host25": Variant(
        "ours-cudagraphs-jpeg-fused-host25",
        compile_mode="reduce-overhead",
        **FUSED_JPEG,
        host_decode_share=0.25,
    ),
    "ours-cudagraphs-jpeg": Variant(
        "ours-cudagraphs-jpeg", compile_mode="reduce-overhead", data="gpu-decode"
    ),
    "ours-jpeg-pil": Variant("ours-jpeg-pil", data="pytorch"),
    "ours-jpeg-dali": Variant("ours-jpeg-dali", data="dali-gpu"),
    # The input pipeline alone: batches/s with no model.
    "loader-gpu-decode": Variant("loader-gpu-decode", model="none", data="gpu-decode"),
    "loader-pil": Variant("loader-pil", model="none", data="pytorch"),
    "loader-gpu-decode-fused": Variant("loader-gpu-decode-fused", model="none", **FUSED_JPEG),
    "loader-gpu-decode-fused-host25": Variant(
        "loader-gpu-decode-fused-host25", model="none", **FUSED_JPEG, host_decode_share=0.25
    ),
    # Every image decoded by the loader workers: what the CPUs alone can feed.
    "loader-host-decode": Variant("loader-host-decode", model="none", **FUSED_JPEG, host_decode_share=1.0),
}
INFERENCE_VARIANTS = {
    "tv-eager": Variant("tv-eager", "torchvision", compile_mode=None, cudnn_benchmark=False, fold_bn=False),
    "tv-compile": Variant("tv-compile", "torchvision", cudnn_benchmark=False, fold_bn=False),
    "ours-eager": Variant("ours-eager", compile_mode=None),
    "ours-bf16": Variant("ours-bf16"),
    "ours-fp16": Variant("ours-fp16", precision="fp16"),
    "ours-cudagraphs": Variant("ours-cudagraphs", compile_mode="reduce-overhead"),
    "ours-fp16-cudagraphs": Variant("ours-fp16-cudagraphs", precision="fp16", compile_mode="reduce-overhead"),
}


def build_model(variant: Variant, num_classes: int) -> nn.Module:
    if variant.model == "torchvision":
        import torchvision

        return torchvision.models.resnet50(num_classes=num_classes)
    from resnet50.model import resnet50

    return resnet50(num_classes=num_classes)


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Fold every eval-mode BatchNorm2d into the Conv2d before it (inference only)."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    def fold(parent: nn.Module) -> None:
        names = list(parent._modules)
        for i, name in enumerate(names):
            child = parent._modules[name]
            nxt = parent._modules[names[i + 1]] if i + 1 < len(names) else None
            if isinstance(child, nn.Conv2d) and isinstance(nxt, nn.BatchNorm2d):
                parent._modules[name] = fuse_conv_bn_eval(child, nxt)
                parent._modules[names[i + 1]] = nn.Identity()
            else:
                fold(child)

    fold(model)
    return model


def compile_model(model: nn.Module, variant: Variant) -> nn.Module:
    if variant.compile_mode is None:
        return model
    options = inductor_options(variant.inductor)
    if options:
        # torch.compile takes either a mode or options; a mode's settings are folded in by hand.
        return torch.compile(model, options=options)
    return torch.compile(model, mode=variant.compile_mode)


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _first_step_and_windows(step, sync, args, batch: int) -> tuple[float, list[float]]:
    """Seconds of the first (compiling) step, then images/s of each timed window.

    With several processes a window lasts as long as its slowest process, and its images are
    those of every process.
    """
    started = time.perf_counter()
    step()
    sync()
    first_step_s = time.perf_counter() - started
    timed = measure(
        step, items_per_call=batch, warmup=args.warmup, iters=args.iters, windows=args.windows, sync=sync
    )
    seconds = timed["window_seconds"]
    world = _world_size()
    if world > 1:
        slowest = torch.tensor([first_step_s, *seconds], dtype=torch.float64, device=_collective_device())
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        first_step_s, *seconds = slowest.tolist()
    return first_step_s, [world * batch * args.iters / s for s in seconds]


def _collective_device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )


def wrap_ddp(model: nn.Module, variant: Variant, device: torch.device) -> nn.Module:
    """DistributedDataParallel with the variant's levers (only when several processes run)."""
    if _world_size() == 1:
        return model
    ddp = distributed_model(
        model,
        device,
        bucket_mb=variant.ddp_bucket_mb,
        static_graph=variant.ddp_static_graph,
        bucket_view=variant.ddp_bucket_view,
        broadcast_buffers=variant.ddp_broadcast_buffers,
    )
    if variant.ddp_comm == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif variant.ddp_comm != "fp32":
        raise SystemExit(f"variant {variant.name}: ddp_comm must be fp32 or bf16, not {variant.ddp_comm!r}")
    return ddp


def _setup(variant: Variant, device: torch.device) -> None:
    fast_math(device)
    torch.backends.cudnn.benchmark = variant.cudnn_benchmark
    seed_everything(0)


def make_jpeg_set(
    root,
    *,
    unique: int = 12800,
    samples: int = 51200,
    classes: int = 100,
    size=(500, 375),
    quality: int = 90,
    workers: int | None = None,
) -> dict:
    """An ImageNet-shaped folder of generated JPEGs for pipeline benchmarks.

    ``unique`` distinct images (smooth colour fields, ellipses and noise: about 110 KB each at
    500x375 and quality 90, near ImageNet's average file) are written once under ``_unique/``;
    ``train/<class>/`` holds ``samples`` symbolic links to them, so an epoch is long enough that
    the loader's per-epoch restart stays out of the timing. ``val/`` links the first images.
    """
    import os
    import pathlib
    from concurrent.futures import ProcessPoolExecutor

    root = pathlib.Path(root)
    classes = min(classes, unique)
    done = root / ".complete"
    if done.exists():
        return json.loads(done.read_text())
    unique_dir = root / "_unique"
    unique_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(str(unique_dir / f"{i:06d}.jpg"), i, size, quality) for i in range(unique)]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        sizes = list(pool.map(_write_jpeg, jobs, chunksize=64))
    for split, count in (("train", max(samples, classes)), ("val", max(classes, min(unique, 50 * classes)))):
        for k in range(count):
            folder = root / split / f"c{k % classes:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            link = folder / f"{k:07d}.jpg"
            if not link.is_symlink():
                link.symlink_to(unique_dir / f"{k % unique:06d}.jpg")
    info = {"unique": unique, "samples": samples, "classes": classes, "size": list(size),
            "mean_kb": sum(sizes) / len(sizes) / 1e3}  # fmt: skip
    done.write_text(json.dumps(info))
    return info


def _write_jpeg(job) -> int:
    import os

    import numpy as np
    from PIL import Image, ImageDraw

    path, seed, (width, height), quality = job
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    image = Image.fromarray(colours).resize((width, height), Image.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(10, 200)), y0 + int(rng.integers(10, 150))
        draw.ellipse([x0, y0, x1, y1], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, 24, (height, width, 3)).astype(np.float32)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path + ".tmp", "JPEG", quality=quality)
    os.replace(path + ".tmp", path)
    return os.path.getsize(path)


def real_batches(variant: Variant, args, device: torch.device, batch: int):
    """Endless (images, labels) from --data-dir through the variant's input pipeline."""
    from resnet50.data import DataConfig, build_loader, check_layout

    if not args.data_dir:
        raise SystemExit(f"variant {variant.name} reads JPEGs: give --data-dir (or --make-jpegs with it)")
    backend = "gpu-decode" if variant.data == "gpu-decode-sync" else variant.data
    classes = check_layout(args.data_dir)
    cfg = DataConfig(
        args.data_dir, backend=backend, batch_size=batch, image_size=args.image_size, workers=args.workers,
        num_classes=len(classes), device=str(device), channels_last=variant.channels_last,
        prefetch=variant.data != "gpu-decode-sync", decode_batch=variant.decode_batch,
        prefetch_depth=variant.prefetch_depth, prefetch_priority=variant.prefetch_priority,
        pin_encoded=variant.pin_encoded, fused_crop=variant.fused_crop,
        host_decode_share=variant.host_decode_share,
    )  # fmt: skip
    loader = build_loader(cfg, "train", classes)
    epoch = 0
    while True:
        yield from loader.epoch(epoch)
        epoch += 1


def bench_loader(variant: Variant, args, device: torch.device) -> dict:
    """The input pipeline alone: batches drawn and made ready on the device, no model."""
    batch = variant.batch_size or args.batch_size
    batches = real_batches(variant, args, device, batch)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        images, _ = next(batches)
        return images

    first_step_s, per_window = _first_step_and_windows(step, sync, args, batch)
    batches.close()
    return {
        "mode": "train", "variant": variant.name, "levers": asdict(variant), "batch_size": batch,
        "images_per_s": statistics.median(per_window), "images_per_s_windows": per_window,
        "first_step_s": first_step_s, "max_memory_gib": None,
    }  # fmt: skip


def bench_train(variant: Variant, args, device: torch.device) -> dict:
    if variant.model == "none":
        return bench_loader(variant, args, device)
    if variant.side_stream and device.type == "cuda":
        # CUDA's legacy default stream waits for, and holds up, work on every blocking stream
        # (a library's internal copies, say); a stream of our own is non-blocking.
        with torch.cuda.stream(torch.cuda.Stream(device)):
            return _train_variant(variant, args, device)
    return _train_variant(variant, args, device)


def _train_variant(variant: Variant, args, device: torch.device) -> dict:
    _setup(variant, device)
    batch = variant.batch_size or args.batch_size
    memory_format = torch.channels_last if variant.channels_last else torch.contiguous_format
    model = build_model(variant, args.num_classes).to(device, memory_format=memory_format).train()
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    fused = {"fused": True} if variant.fused_optimizer else {}
    lr = 0.256 * batch / 256
    optimizer = torch.optim.SGD(parameter_groups(model, 3.0517578125e-05), lr=lr, momentum=0.875, **fused)
    scaler = grad_scaler(device, variant.precision)
    if variant.data != "synthetic" and _world_size() > 1:
        raise SystemExit(f"variant {variant.name} reads JPEGs: multi-GPU runs time synthetic variants only")
    forward = compile_model(wrap_ddp(model, variant, device), variant)

    # Each process its own batch (the weights start equal: the seed was set before the model was built).
    torch.manual_seed(1 + (dist.get_rank() if _world_size() > 1 else 0))
    images = torch.randn(batch, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, args.num_classes, (batch,), device=device)
    batches = None if variant.data == "synthetic" else real_batches(variant, args, device, batch)

    waited = [0.0, 0]  # seconds the training loop waited for input batches, batches taken

    def step():
        nonlocal images, labels
        if batches is not None:
            began = time.perf_counter()
            images, labels = next(batches)
            waited[0] += time.perf_counter() - began
            waited[1] += 1
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, variant.precision):
            loss = criterion(forward(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    first_step_s, per_window = _first_step_and_windows(step, sync, args, batch)
    if args.profile and device.type == "cuda":
        trace = os.path.join(args.trace, f"{variant.name}.json.gz") if args.trace and _is_primary() else None
        # every process steps: collectives
        profile = profile_step(step, sync, families=RESNET_FAMILIES, trace_path=trace)
        if _is_primary():
            print(
                f"profile of {variant.name}, per step:\n" + format_profile(profile),
                file=sys.stderr,
                flush=True,
            )
    if batches is not None:
        batches.close()
    return {
        "mode": "train",
        "variant": variant.name,
        "levers": asdict(variant),
        "batch_size": batch,
        "gpus": _world_size(),
        "replicas_agree": replicas_agree(model),
        "images_per_s": statistics.median(per_window),
        "images_per_s_windows": per_window,
        "first_step_s": first_step_s,
        "input_wait_ms": 1e3 * waited[0] / waited[1] if waited[1] else None,
        "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
    }


def bench_inference(variant: Variant, args, device: torch.device) -> dict:
    _setup(variant, device)
    memory_format = torch.channels_last if variant.channels_last else torch.contiguous_format
    model = build_model(variant, args.num_classes).eval()
    if variant.fold_bn:
        model = fold_batchnorm(model)
    model = model.to(device, memory_format=memory_format)
    input_dtype = amp_dtype(variant.precision) or torch.float32
    # Inference weights in half precision outright: no per-call casts.
    model = model.to(input_dtype)
    forward = compile_model(model, variant)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results = {}
    for batch in sorted({variant.batch_size or args.batch_size, 1}, reverse=True):
        images = torch.randn(batch, 3, args.image_size, args.image_size, device=device, dtype=input_dtype)
        images = images.contiguous(memory_format=memory_format)

        @torch.inference_mode()
        def step(images=images):
            return forward(images)

        if batch == 1:
            timed = measure(
                step, items_per_call=1, warmup=args.warmup, iters=args.latency_iters, sync=sync, per_call=True
            )
            results["latency_bs1_ms"] = timed["latency_ms"]
        else:
            timed = measure(
                step,
                items_per_call=batch,
                warmup=args.warmup,
                iters=args.iters,
                windows=args.windows,
                sync=sync,
            )
            results["images_per_s"] = timed["throughput"]
            results["images_per_s_windows"] = timed["window_throughputs"]
            results["batch_size"] = batch
    return {"mode": "inference", "variant": variant.name, "levers": asdict(variant), **results}


# Kernel families of a ResNet-50 step for zoo.bench.profile_step; first match wins.
RESNET_FAMILIES = (
    ("triton (fused pointwise/reductions)", ("triton",)),
    ("convolution (cuDNN)", ("conv", "xmma", "cudnn", "sm90", "implicit", "wgrad", "dgrad", "fprop")),
    ("matmul", ("gemm", "cublas", "cutlass", "nvjet")),
    ("JPEG decode (nvJPEG)", ("jpeg", "huffman", "idct", "dct")),
    ("crop + resize (roi_align)", ("roi",)),
    ("NCCL (all-reduce)", ("nccl",)),
    ("memcpy/memset", ("memcpy", "memset")),
)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmark.sh",
        description="Throughput of our ResNet-50 recipe and the torchvision baseline, same process, same data.",
    )
    p.add_argument("--mode", choices=["train", "inference", "both"], default="both")
    p.add_argument(
        "--variants",
        default="tv-compile,ours-bf16",
        help="comma-separated variant names; 'all' runs every one. Train: "
        + ", ".join(TRAIN_VARIANTS)
        + ". Inference: "
        + ", ".join(INFERENCE_VARIANTS),
    )
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument(
        "--warmup", type=int, default=20, help="steps before timing (after the first, compiling, step)"
    )
    p.add_argument("--iters", type=int, default=50, help="steps in each timed window")
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    p.add_argument("--latency-iters", type=int, default=200, help="batch-1 calls timed for latency")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--amp",
        choices=zoo.cli.AMP_CHOICES,
        default=None,
        help="precision of every variant run (default: each variant's own; fp32 = TF32 matmuls/convolutions)",
    )
    p.add_argument(
        "--override", action="append", default=[], help="VARIANT.LEVER=VALUE, e.g. ours-bf16.batch_size=384"
    )
    p.add_argument(
        "--profile", action="store_true", help="print GPU time per kernel family for each train variant"
    )
    p.add_argument(
        "--trace", metavar="DIR",
        help="with --profile: write each variant's profiled steps as a timeline, DIR/<variant>.json.gz "
        "(Chrome trace: chrome://tracing or ui.perfetto.dev)",
    )  # fmt: skip
    p.add_argument("--output", metavar="FILE", help="write the report here as JSON (zoo.bench schema)")
    p.add_argument(
        "--data-dir", help="ImageNet-style folder for the real-pipeline variants (ours-jpeg*, loader-*)"
    )
    p.add_argument(
        "--workers", type=int, default=8, help="loader worker processes for real-pipeline variants"
    )
    p.add_argument(
        "--make-jpegs", type=int, metavar="N", default=0,
        help="first generate N distinct 500x375 JPEGs into --data-dir (with 4x as many training samples)",
    )  # fmt: skip
    p.add_argument(
        "--switch-interval", type=float, metavar="S",
        help="sys.setswitchinterval(S): how long a Python thread may hold the GIL (default 0.005)",
    )  # fmt: skip
    p.add_argument(
        "--gpus", metavar="N[,N...]",
        help="multi-GPU scaling: one torchrun per variant and GPU count (synthetic train variants), "
        "then a table of img/s and scaling efficiency against the same variant on 1 GPU",
    )  # fmt: skip
    p.add_argument(
        "--run-timeout", type=float, default=900, metavar="S",
        help="with --gpus: seconds one torchrun may take before it is stopped and reported as failed",
    )  # fmt: skip
    args = zoo.cli.parse_args(p, argv, renamed={"--json": "--output"})
    if args.make_jpegs and not args.data_dir:
        p.error("--make-jpegs needs --data-dir")
    if args.trace and not args.profile:
        p.error("--trace needs --profile")
    if args.trace and args.gpus:
        p.error("--trace writes one process's timeline: leave out --gpus")
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
    if args.gpus is not None:
        try:
            args.gpus = sorted({int(n) for n in args.gpus.split(",") if n})
        except ValueError:
            p.error(f"--gpus {args.gpus!r}: expected GPU counts such as 1,2,4")
        if not args.gpus or min(args.gpus) < 1:
            p.error("--gpus: GPU counts must be 1 or more")
        if args.mode == "inference" or args.data_dir:
            p.error("--gpus times synthetic training: use --mode train without --data-dir")
    return args


def _apply_overrides(
    table: dict[str, Variant], overrides: list[str], amp: str | None = None
) -> dict[str, Variant]:
    """The variants with ``--amp`` (every variant's precision) and then ``--override`` items applied."""
    table = {name: replace(variant, precision=amp) if amp else variant for name, variant in table.items()}
    for item in overrides:
        try:
            key, value = item.split("=", 1)
            name, lever = key.split(".", 1)
        except ValueError:
            raise SystemExit(f"--override {item!r}: expected VARIANT.LEVER=VALUE") from None
        if name not in table:
            continue
        current = getattr(table[name], lever, None)
        if lever not in Variant.__dataclass_fields__:
            raise SystemExit(f"--override {item!r}: no lever named {lever!r}")
        if isinstance(current, bool):
            parsed = value.lower() in ("1", "true", "yes")
        elif lever == "inductor":
            parsed = tuple(v for v in value.split(";") if v)
        elif lever in ("batch_size", "decode_batch", "prefetch_depth", "ddp_bucket_mb"):
            parsed = int(value)
        elif lever == "host_decode_share":
            parsed = float(value)
        else:
            parsed = None if value.lower() == "none" else value
        table[name] = replace(table[name], **{lever: parsed})
    return table


def _pick(table: dict[str, Variant], names: str) -> list[Variant]:
    chosen = list(table) if names == "all" else [n for n in names.split(",") if n]
    unknown = [n for n in chosen if n not in TRAIN_VARIANTS and n not in INFERENCE_VARIANTS]
    if unknown:
        raise SystemExit(
            f"unknown variant(s) {unknown}; known: {sorted(set(TRAIN_VARIANTS) | set(INFERENCE_VARIANTS))}"
        )
    return [table[n] for n in chosen if n in table]


def print_table(results: list[dict]) -> None:
    print(f"{'mode':<10} {'variant':<22} {'batch':>5} {'img/s':>10} {'vs tv':>7}  extra")
    for mode in ("train", "inference"):
        rows = [r for r in results if r["mode"] == mode]
        # Ratios are against the compiled torchvision run when there is one, else the first torchvision run.
        baselines = [r for r in rows if r["levers"]["model"] == "torchvision"]
        base = next(
            (r for r in baselines if r["variant"] == "tv-compile"), baselines[0] if baselines else None
        )
        for r in rows:
            ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
            extra = ""
            if "latency_bs1_ms" in r:
                lat = r["latency_bs1_ms"]
                extra = f"bs1 p50 {lat['p50']:.2f} ms p99 {lat['p99']:.2f} ms"
            elif r.get("first_step_s") is not None:
                extra = f"first step {r['first_step_s']:.0f} s"
                if r.get("input_wait_ms") is not None:
                    extra += f", waited {r['input_wait_ms']:.1f} ms/step for input"
            print(
                f"{mode:<10} {r['variant']:<22} {r['batch_size']:>5} {r['images_per_s']:>10.0f} {ratio:>7}  {extra}"
            )


def _is_primary() -> bool:
    return _world_size() == 1 or dist.get_rank() == 0


def _child_args(args) -> list[str]:
    """The flags a --gpus run passes on to each torchrun (timing, shape and lever settings)."""
    out = ["--mode", "train", "--device", args.device]
    for flag in ("batch_size", "image_size", "num_classes", "warmup", "iters", "windows"):
        out += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.amp:
        out += ["--amp", args.amp]
    for item in args.override:
        out += ["--override", item]
    if args.profile:
        out.append("--profile")
    return out


def run_scaling(args) -> list[dict]:
    """One torchrun per (variant, GPU count); returns the results of the runs that finished."""
    table = _apply_overrides(TRAIN_VARIANTS, args.override, args.amp)
    variants = _pick(table, args.variants)
    real = [v.name for v in variants if v.data != "synthetic" or v.model == "none"]
    if real:
        raise SystemExit(f"--gpus times synthetic training variants only, not {real}")
    if args.device.startswith("cuda"):
        visible = torch.cuda.device_count()
        if max(args.gpus) > visible:
            raise SystemExit(f"--gpus {max(args.gpus)} asked for, but {visible} CUDA device(s) are visible")
    results = []
    with tempfile.TemporaryDirectory(prefix="r50-scaling-") as tmp:
        for variant in variants:
            for n in args.gpus:
                report = os.path.join(tmp, f"{variant.name}-{n}.json")
                command = [
                    sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                    "-m", "resnet50.benchmark", *_child_args(args), "--variants", variant.name, "--output", report,
                ]  # fmt: skip
                print(f"== {variant.name} on {n} GPU(s)", file=sys.stderr, flush=True)
                started = time.perf_counter()
                try:
                    # Each run's own table would repeat what the scaling table says: its stdout is dropped.
                    code = subprocess.run(
                        command, timeout=args.run_timeout, stdout=subprocess.DEVNULL
                    ).returncode
                except subprocess.TimeoutExpired:
                    code = "timeout"
                if code != 0 or not os.path.exists(report):
                    print(f"== {variant.name} on {n} GPU(s) failed ({code})", file=sys.stderr, flush=True)
                    continue
                with open(report) as f:
                    (result,) = json.load(f)["results"]
                result["run_s"] = time.perf_counter() - started
                results.append(result)
    add_scaling(results)
    return results


def add_scaling(results: list[dict]) -> None:
    """Scaling efficiency: img/s on N GPUs over N times the same variant's img/s on 1 GPU."""
    single = {r["variant"]: r["images_per_s"] for r in results if r.get("gpus", 1) == 1}
    for r in results:
        one = single.get(r["variant"])
        r["scaling"] = r["images_per_s"] / (r.get("gpus", 1) * one) if one else None


def print_scaling(results: list[dict]) -> None:
    print(
        f"{'variant':<22} {'GPUs':>4} {'batch/GPU':>9} {'img/s':>10} {'img/s/GPU':>10} {'scaling':>8} {'vs tv':>7}"
    )
    for r in results:
        gpus = r.get("gpus", 1)
        base = next(
            (b for b in results if b["variant"] == "tv-compile" and b.get("gpus", 1) == gpus),
            next((b for b in results if b["levers"]["model"] == "torchvision" and b.get("gpus", 1) == gpus), None),
        )  # fmt: skip
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
        scaling = f"{100 * r['scaling']:.1f}%" if r.get("scaling") else "-"
        print(
            f"{r['variant']:<22} {gpus:>4} {r['batch_size']:>9} {r['images_per_s']:>10.0f} "
            f"{r['images_per_s'] / gpus:>10.0f} {scaling:>8} {ratio:>7}"
        )


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.gpus:
        results = run_scaling(args)
        print_scaling(results)
        if args.output:
            from zoo.bench import write_report

            write_report(
                args.output, results, model="resnet50", framework="pytorch", torch=torch.__version__,
                device=describe_device(torch.device(args.device)), image_size=args.image_size,
                command=" ".join(sys.argv),
            )  # fmt: skip
        if not results:
            raise SystemExit("--gpus: no run finished")
        return
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but no CUDA device is visible")
    # Under torchrun each process takes the GPU of its local rank ("cuda" alone names no GPU).
    env, device = init_distributed(None if args.device == "cuda" else args.device)
    if env.world_size > 1 and args.mode != "train":
        raise SystemExit("several processes time training only: give --mode train")
    results = []
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.make_jpegs:
        started = time.perf_counter()
        info = make_jpeg_set(args.data_dir, unique=args.make_jpegs, samples=4 * args.make_jpegs)
        print(
            f"JPEG set {args.data_dir}: {info} ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    modes = ["train", "inference"] if args.mode == "both" else [args.mode]
    for mode in modes:
        table = _apply_overrides(
            TRAIN_VARIANTS if mode == "train" else INFERENCE_VARIANTS, args.override, args.amp
        )
        for variant in _pick(table, args.variants):
            run = bench_train if mode == "train" else bench_inference
            result = run(variant, args, device)
            results.append(result)
            if env.is_primary:
                print(
                    json.dumps({k: v for k, v in result.items() if k != "levers"}),
                    file=sys.stderr,
                    flush=True,
                )
            torch._dynamo.reset()
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
    if dist.is_initialized():
        dist.destroy_process_group()
    if not env.is_primary:
        return
    print_table(results)
    if args.output:
        from zoo.bench import write_report

        write_report(
            args.output,
            results,
            model="resnet50",
            framework="pytorch",
            torch=torch.__version__,
            device=describe_device(device),
            image_size=args.image_size,
            command=" ".join(sys.argv),
            gpus=env.world_size,
        )


if __name__ == "__main__":
    main()
