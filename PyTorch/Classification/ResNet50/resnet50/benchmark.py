"""Training and inference images/s of our ResNet-50 recipe next to torchvision's ``resnet50``, in one
process on the same device and the same synthetic batch.

    python -m resnet50.benchmark --mode train                                   # ours vs torchvision
    python -m resnet50.benchmark --mode train --set train.compile=default --set optimizer.fused=false
    python -m resnet50.benchmark --mode inference --amp fp16 --models tv-eager,tv-compile,ours
    python -m resnet50.benchmark --mode train --gpus 1,2                        # DDP scaling, one torchrun each

"ours" is a recipe (``--recipe``, default the 1-GPU recipe, with ``--set``, ``--amp`` and
``--batch-size`` overrides): training times ``resnet50.step.TrainStep``, the step ``train.py`` runs;
inference times ``resnet50.inference.inference_model`` (BatchNorm folded, weights in ``--amp``), the
model ``evaluate.py`` scores and ``export.py`` writes, compiled with the recipe's ``train.compile``.
The baselines are torchvision's model used as a user would: ``tv-eager`` (autocast, channels_last,
foreach SGD, plain DDP) and ``tv-compile`` (the same with ``torch.compile``). With ``--data-dir``,
ours trains on the recipe's input pipeline (``data.backend``) and ``loader`` times that pipeline alone.
Under torchrun each process trains on its own GPU and the report gives the images/s of all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import zoo.cli
from zoo.bench import format_profile, measure, profile_step, write_report
from zoo.cli import entry_point
from zoo.recipe import compile_mode
from zoo.recipe import flag as recipe_flag
from zoo.torch import (
    autocast,
    close_distributed,
    distributed_model,
    fast_math,
    grad_scaler,
    init_distributed,
    parameter_groups,
    replicas_agree,
    seed_everything,
)

from resnet50.data import DataConfig, DataError, build_loader, check_layout, one_line
from resnet50.inference import inference_model
from resnet50.step import (
    TrainStep,
    build_model,
    build_train_step,
    peak_learning_rate,
    recipe_levers,
)
from resnet50.train import DEFAULT_RECIPE

MODELS = ("tv-eager", "tv-compile", "ours", "loader")
FLAG_TO_RECIPE = {"batch_size": "data.batch_size", "amp": "train.amp"}
# Kernel families of a ResNet-50 step for --profile; first match wins.
RESNET_FAMILIES = (
    ("triton (fused pointwise/reductions)", ("triton",)),
    ("convolution (cuDNN)", ("conv", "xmma", "cudnn", "sm90", "implicit", "wgrad", "dgrad", "fprop")),
    ("matmul", ("gemm", "cublas", "cutlass", "nvjet")),
    ("JPEG decode (nvJPEG)", ("jpeg", "huffman", "idct", "dct")),
    ("crop + resize (roi_align)", ("roi",)),
    ("NCCL (all-reduce)", ("nccl",)),
    ("memcpy/memset", ("memcpy", "memset")),
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmark.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    p.add_argument(
        "--data-dir", help="image folder: ours trains on the recipe's input pipeline (default: synthetic)"
    )
    p.add_argument("--mode", choices=("train", "inference", "both"), default="both")
    p.add_argument("--models", default="tv-eager,tv-compile,ours", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--batch-size", type=int, default=None, help="per GPU (recipe key data.batch_size)")
    p.add_argument(
        "--warmup", type=int, default=20, help="steps before timing, after the first (compiling) one"
    )
    p.add_argument("--iters", type=int, default=50, help="steps in each timed window")
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    p.add_argument("--latency-iters", type=int, default=200, help="batch-1 inference calls timed (0: none)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
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
        "--gpus",
        metavar="N[,N...]",
        help="one torchrun per model and GPU count (training), then a scaling table",
    )
    p.add_argument(
        "--run-timeout",
        type=float,
        default=900,
        metavar="S",
        help="with --gpus: seconds one torchrun may take",
    )
    args = zoo.cli.parse_args(p, argv, renamed={"--json": "--output", "--variants": "--models"})
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
    if args.gpus is not None:
        try:
            args.gpus = sorted({int(n) for n in args.gpus.split(",") if n})
        except ValueError:
            p.error(f"--gpus {args.gpus!r}: expected GPU counts such as 1,2,4")
        if not args.gpus or min(args.gpus) < 1:
            p.error("--gpus: GPU counts must be 1 or more")
        if args.mode != "train" or args.data_dir or args.trace:
            p.error("--gpus times synthetic training: use --mode train without --data-dir or --trace")
    args.recipe_dict = zoo.cli.recipe_from_args(args, FLAG_TO_RECIPE)
    recipe_levers(args.recipe_dict)  # a misspelt lever is a one-line error before anything runs
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
    return args


def data_config(
    recipe: dict, device, backend: str = "synthetic", data_dir=None, rank: int = 0, world: int = 1
):
    data = recipe["data"]
    return DataConfig(
        data_dir, backend=backend, batch_size=int(data["batch_size"]), image_size=int(data["image_size"]),
        workers=int(data["workers"]), num_classes=int(recipe["model"]["num_classes"]), seed=int(recipe["train"]["seed"]) + rank,
        rank=rank, world_size=world, device=str(device), crop_scale=(float(data["min_crop_scale"]), 1.0),
        channels_last=recipe_flag(recipe["train"]["channels_last"], "train.channels_last"),
    )  # fmt: skip


def input_batches(args, device, rank: int, world: int):
    """Endless (images, labels) on the device: the synthetic batch, or the recipe's pipeline on --data-dir."""
    recipe = args.recipe_dict
    if not args.data_dir:
        loader = build_loader(data_config(recipe, device, rank=rank, world=world), "train")
        while True:
            yield loader.images, loader.labels
    classes = check_layout(args.data_dir, recipe["model"]["num_classes"], splits=("train",))
    cfg = data_config(recipe, device, recipe["data"]["backend"], args.data_dir, rank, world)
    loader, epoch = build_loader(cfg, "train", classes), 0
    while True:
        yield from loader.epoch(epoch)
        epoch += 1


def ours_train_step(recipe: dict, device, world: int) -> TrainStep:
    """The training step train.py builds from the same recipe."""
    return build_train_step(recipe, device, world_size=world)


def torchvision_train_step(name: str, recipe: dict, device, world: int):
    """torchvision's resnet50 as a user writes it: autocast, channels_last, foreach SGD, plain DDP
    (DistributedDataParallel's defaults), compiled for tv-compile; the recipe's hyper-parameters."""
    import torchvision

    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet50(num_classes=int(recipe["model"]["num_classes"]))
    model = model.to(device, memory_format=torch.channels_last).train()
    opt = recipe["optimizer"]
    optimizer = torch.optim.SGD(parameter_groups(model, float(opt["weight_decay"])),
                                lr=peak_learning_rate(recipe, world), momentum=float(opt["momentum"]))  # fmt: skip
    amp = str(recipe["train"]["amp"])
    scaler = grad_scaler(device, amp)
    criterion = nn.CrossEntropyLoss(label_smoothing=float(recipe["train"]["label_smoothing"]))
    if world > 1:
        model = distributed_model(
            model, device, static_graph=False, bucket_view=False, broadcast_buffers=True
        )
    forward = torch.compile(model) if name == "tv-compile" else model

    def step(images, labels):
        images = images.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, amp):
            loss = criterion(forward(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    step.model = model
    return step


def levers(name: str, recipe: dict) -> dict:
    """What each row ran with: the recipe's levers for ours, torchvision's fixed ones for the baselines."""
    if name.startswith("tv-"):
        compiled = "default" if name == "tv-compile" else None
        return {"amp": str(recipe["train"]["amp"]), "compile": compiled, "channels_last": True,
                "fused_optimizer": False, "cudnn_benchmark": False, "fold_bn": False}  # fmt: skip
    return {**recipe_levers(recipe), "fold_bn": True}


def timed(step, args, device, items: int, per_call: bool = False) -> dict:
    """The first call's seconds, then zoo.bench.measure; windows last as long as the slowest process."""
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    started = time.perf_counter()
    step()
    if sync:
        sync()
    first_step_s = time.perf_counter() - started
    result = measure(step, items_per_call=items, warmup=args.warmup, iters=args.iters,
                     windows=args.windows, sync=sync, per_call=per_call)  # fmt: skip
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world > 1:
        slowest = torch.tensor([first_step_s, *result["window_seconds"]], dtype=torch.float64,
                               device=device if dist.get_backend() == "nccl" else "cpu")  # fmt: skip
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        first_step_s, *result["window_seconds"] = slowest.tolist()
    rates = [world * items * args.iters / s for s in result["window_seconds"]]
    return {"images_per_s": sorted(rates)[len(rates) // 2], "images_per_s_windows": rates,
            "first_step_s": first_step_s, **({"latency_ms": result["latency_ms"]} if per_call else {})}  # fmt: skip


def bench_train(name: str, args, device, rank: int, world: int) -> dict:
    recipe = args.recipe_dict
    seed_everything(int(recipe["train"]["seed"]))  # every process starts from the same weights
    batches = input_batches(args, device, rank, world)
    if name == "loader":
        train_step = None
    elif name == "ours":
        train_step = ours_train_step(recipe, device, world)
    else:
        train_step = torchvision_train_step(name, recipe, device, world)

    def step():
        images, labels = next(batches)
        if train_step is not None:
            train_step(images, labels)

    row = timed(step, args, device, int(recipe["data"]["batch_size"]))
    if args.profile and device.type == "cuda":
        trace = os.path.join(args.trace, f"{name}.json.gz") if args.trace and rank == 0 else None
        profile = profile_step(step, torch.cuda.synchronize, families=RESNET_FAMILIES, trace_path=trace)
        if rank == 0:
            print(f"profile of {name}, per step:\n{format_profile(profile)}", file=sys.stderr, flush=True)
    batches.close()
    input_kind = recipe["data"]["backend"] if args.data_dir else "synthetic"
    return {**row, "gpus": world, "input": input_kind,
            "replicas_agree": replicas_agree(train_step.model) if train_step is not None else None}  # fmt: skip


def bench_inference(name: str, args, device) -> dict:
    recipe = args.recipe_dict
    seed_everything(int(recipe["train"]["seed"]))
    amp = str(recipe["train"]["amp"])
    batch, size = int(recipe["data"]["batch_size"]), int(recipe["data"]["image_size"])
    if name == "ours":
        model = inference_model(build_model(recipe), amp=amp, device=device,
                                channels_last=recipe_flag(recipe["train"]["channels_last"], "train.channels_last"))  # fmt: skip
        mode, dtype, memory_format = (
            compile_mode(recipe["train"]["compile"]),
            torch.float32,
            torch.contiguous_format,
        )
        torch.backends.cudnn.benchmark = recipe_flag(
            recipe["train"]["cudnn_benchmark"], "train.cudnn_benchmark"
        )
    else:
        import torchvision
        from zoo.torch import amp_dtype

        torch.backends.cudnn.benchmark = False
        dtype, memory_format = amp_dtype(amp) or torch.float32, torch.channels_last
        model = torchvision.models.resnet50(num_classes=int(recipe["model"]["num_classes"])).eval()
        model = model.to(device, memory_format=memory_format).to(dtype)  # weights in half outright
        mode = "default" if name == "tv-compile" else None
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
    return {**row, "gpus": 1, "input": "synthetic"}


def run(args) -> list[dict]:
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda asked for, but no CUDA device is visible")
    # Under torchrun each process takes the GPU of its local rank ("cuda" alone names no GPU).
    env, device = init_distributed(None if args.device == "cuda" else args.device)
    if env.world_size > 1 and args.mode != "train":
        raise SystemExit("error: several processes time training only: give --mode train")
    if args.make_jpegs and env.rank == 0:
        from resnet50.data.jpeg_set import make_jpeg_set

        info = make_jpeg_set(args.data_dir, unique=args.make_jpegs, samples=4 * args.make_jpegs)
        print(f"JPEG set {args.data_dir}: {info}", file=sys.stderr, flush=True)
    if args.make_jpegs and dist.is_initialized():
        dist.barrier()  # the other processes read the set rank 0 wrote
    if args.data_dir:  # the models get the folder's classes
        args.recipe_dict["model"]["num_classes"] = len(check_layout(args.data_dir, splits=("train",)))
    results = []
    for mode in ("train", "inference") if args.mode == "both" else (args.mode,):
        for name in args.models:
            if mode == "inference" and name == "loader":
                continue
            fast_math(device)
            if mode == "train":
                row = bench_train(name, args, device, env.rank, env.world_size)
            else:
                row = bench_inference(name, args, device)
            row = {"mode": mode, "model": name, "batch_size": int(args.recipe_dict["data"]["batch_size"]),
                   "amp": str(args.recipe_dict["train"]["amp"]), "levers": levers(name, args.recipe_dict), **row,
                   "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}  # fmt: skip
            results.append(row)
            if env.rank == 0:
                print(
                    json.dumps({k: v for k, v in row.items() if k != "levers"}), file=sys.stderr, flush=True
                )
            torch._dynamo.reset()
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
    close_distributed()
    return results if env.rank == 0 else []


def print_table(results: list[dict]) -> None:
    """One row per run, with its ratio to tv-compile (training) or tv-eager (inference) of the same call."""
    print(f"{'mode':<10} {'model':<11} {'GPUs':>4} {'batch':>5} {'amp':<5} {'img/s':>10} {'vs tv':>7}  extra")
    for r in results:
        reference = "tv-compile" if r["mode"] == "train" else "tv-eager"
        base = next(
            (b for b in results if (b["mode"], b["model"], b["gpus"]) == (r["mode"], reference, r["gpus"])),
            None,
        )
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
        extra = f"first step {r['first_step_s']:.0f} s"
        if "latency_bs1_ms" in r:
            extra += f", bs1 p50 {r['latency_bs1_ms']['p50']:.2f} ms p99 {r['latency_bs1_ms']['p99']:.2f} ms"
        if r.get("scaling"):
            extra += f", scaling {100 * r['scaling']:.1f}%"
        print(f"{r['mode']:<10} {r['model']:<11} {r['gpus']:>4} {r['batch_size']:>5} {r['amp']:<5} "
              f"{r['images_per_s']:>10.0f} {ratio:>7}  {extra}")  # fmt: skip


def run_scaling(args, argv: list[str]) -> list[dict]:
    """One torchrun per (model, GPU count) with the same flags; scaling = img/s(N) / (N x img/s(1))."""
    if args.device.startswith("cuda") and max(args.gpus) > torch.cuda.device_count():
        raise SystemExit(
            f"error: --gpus {max(args.gpus)} asked for, but {torch.cuda.device_count()} CUDA device(s) are visible"
        )
    child = [a for i, a in enumerate(argv) if a not in ("--gpus", "--models", "--output", "--run-timeout")
             and (i == 0 or argv[i - 1] not in ("--gpus", "--models", "--output", "--run-timeout"))]  # fmt: skip
    results = []
    with tempfile.TemporaryDirectory(prefix="r50-scaling-") as tmp:
        for name in args.models:
            for n in args.gpus:
                report = os.path.join(tmp, f"{name}-{n}.json")
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                           "-m", "resnet50.benchmark", *child, "--models", name, "--output", report]  # fmt: skip
                print(f"== {name} on {n} GPU(s)", file=sys.stderr, flush=True)
                try:
                    code = subprocess.run(
                        command, timeout=args.run_timeout, stdout=subprocess.DEVNULL
                    ).returncode
                except subprocess.TimeoutExpired:
                    code = "timeout"
                if code != 0 or not os.path.exists(report):
                    print(f"== {name} on {n} GPU(s) failed ({code})", file=sys.stderr, flush=True)
                    continue
                with open(report) as f:
                    results += json.load(f)["results"]
    single = {r["model"]: r["images_per_s"] for r in results if r["gpus"] == 1}
    for r in results:
        r["scaling"] = r["images_per_s"] / (r["gpus"] * single[r["model"]]) if r["model"] in single else None
    return results


@entry_point
def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        results = run_scaling(args, argv) if args.gpus else run(args)
    except DataError as e:
        raise SystemExit(f"error: {one_line(e)}") from None
    if args.gpus and not results:
        raise SystemExit("error: --gpus: no run finished")
    if not results:
        return  # a process other than rank 0
    print_table(results)
    if args.output:
        device = (
            torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({platform.machine()})"
        )
        write_report(args.output, results, model="resnet50", framework="pytorch", torch=torch.__version__,
                     device=device, recipe=args.recipe_dict, command=" ".join(["benchmark.sh", *argv]))  # fmt: skip


if __name__ == "__main__":
    main()
