"""Train ResNet-50 v1.5 on an image folder (ImageNet layout) with a recipe; flags override the recipe.

    python -m resnet50.train --recipe configs/resnet50_1gpu_90ep.yaml --data-dir /data/imagenet
    torchrun --nproc-per-node 8 -m resnet50.train --recipe configs/resnet50_8gpu_90ep.yaml --data-dir ...

Every epoch ends with top-1/top-5 validation and a checkpoint (RESULTS_DIR/checkpoint.pt, written
atomically); ``--resume auto`` continues from it exactly: model, optimizer, grad scaler, LR schedule,
RNG states and the position in the epoch.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pathlib
import random
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from zoo.checkpoints import CheckpointError, atomic_write
from zoo.dist import get_dist_env
from zoo.log import MetricsLogger
from zoo.recipe import load_recipe, parse_overrides
from zoo.rng import rng_state, set_rng_state

from resnet50.checkpoints import load_weights, read_checkpoint, resolve_weights
from resnet50.data import BACKENDS, DataConfig, DataError, build_loader, check_layout, one_line
from resnet50.model import resnet50

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "resnet50_1gpu_90ep.yaml"
CHECKPOINT_NAME = "checkpoint.pt"

# flag name -> dotted recipe key; a flag left unset keeps the recipe's value.
FLAG_TO_RECIPE = {
    "data_backend": "data.backend",
    "batch_size": "data.batch_size",
    "image_size": "data.image_size",
    "workers": "data.workers",
    "min_crop_scale": "data.min_crop_scale",
    "num_classes": "model.num_classes",
    "zero_init_residual": "model.zero_init_residual",
    "lr_per_256": "optimizer.lr_per_256",
    "momentum": "optimizer.momentum",
    "weight_decay": "optimizer.weight_decay",
    "epochs": "schedule.epochs",
    "warmup_epochs": "schedule.warmup_epochs",
    "label_smoothing": "train.label_smoothing",
    "amp": "train.amp",
    "channels_last": "train.channels_last",
    "compile": "train.compile",
    "seed": "train.seed",
    "target_accuracy": "train.target_accuracy",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m resnet50.train",
        description="Train ResNet-50 v1.5 (recipe YAML + flags; torchrun for several GPUs or nodes).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--recipe", default=str(DEFAULT_RECIPE), help="recipe YAML (configs/*.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="folder with train/ and val/ ($DATA_DIR)"
    )
    p.add_argument(
        "--results-dir", default=os.environ.get("RESULTS_DIR", "results"), help="logs + checkpoints"
    )
    p.add_argument("--data-backend", choices=BACKENDS, default=None)
    p.add_argument("--synthetic", action="store_true", help="same as --data-backend synthetic")
    p.add_argument("--batch-size", type=int, default=None, help="per process (GPU)")
    p.add_argument("--image-size", type=int, default=None, help="training crop size (224 for ImageNet)")
    p.add_argument("--workers", type=int, default=None, help="data loader workers per process")
    p.add_argument("--min-crop-scale", type=float, default=None, help="smallest random-resized-crop area")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--zero-init-residual", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--lr-per-256", type=float, default=None, help="peak LR for a global batch of 256 (scaled)"
    )
    p.add_argument("--momentum", type=float, default=None)
    p.add_argument("--weight-decay", type=float, default=None, help="not applied to BatchNorm and biases")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--warmup-epochs", type=float, default=None)
    p.add_argument("--label-smoothing", type=float, default=None)
    p.add_argument("--amp", choices=("bf16", "fp16", "none"), default=None, help="autocast precision")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--target-accuracy", type=float, default=None, help="stop once val top-1 (%%) reaches it")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="cap the batches per epoch (smoke runs)")
    p.add_argument(
        "--resume", default=None, help="checkpoint to continue, or 'auto' (RESULTS_DIR/checkpoint.pt)"
    )
    p.add_argument("--pretrained", default=None, help="start from a registry checkpoint (checkpoints.yaml)")
    p.add_argument("--init-checkpoint", default=None, help="start from the weights in this file")
    p.add_argument(
        "--reset-classifier", action="store_true", help="with --pretrained: new fc for new classes"
    )
    p.add_argument(
        "--checkpoint-every", type=int, default=0, help="also checkpoint every N steps (0: per epoch)"
    )
    p.add_argument("--log-every", type=int, default=20, help="steps between loss readings (each one syncs)")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK if available)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU training)")
    p.add_argument(
        "--exit-after-steps", type=int, default=None, help="end abruptly after N steps (crash test)"
    )
    args = p.parse_args(argv)
    if args.synthetic:
        args.data_backend = "synthetic"
    return args


def build_recipe(args) -> dict:
    overrides = parse_overrides(args.set)
    for flag, key in FLAG_TO_RECIPE.items():
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    return load_recipe(args.recipe, overrides)


# ------------------------------------------------------------------------------------------- set-up
def init_distributed(device_arg: str | None):
    """(DistEnv, device): joins the process group when launched by torchrun/SLURM/MPI."""
    env = get_dist_env()
    if device_arg:
        device = torch.device(device_arg)
    elif torch.cuda.is_available():
        device = torch.device("cuda", env.local_rank)
    else:
        device = torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if env.world_size > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        os.environ.setdefault("MASTER_PORT", str(env.master_port))
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method="env://", rank=env.rank, world_size=env.world_size)
    return env, device


def distributed_model(
    model: nn.Module,
    device: torch.device,
    *,
    bucket_mb: int = 25,
    static_graph: bool = True,
    bucket_view: bool = True,
    broadcast_buffers: bool = False,
) -> nn.Module:
    """DistributedDataParallel with our defaults (PERF.md measures each): every step uses every
    parameter (static graph), gradients are views into the buckets, and BatchNorm statistics stay
    per GPU (no broadcast of rank 0's buffers every forward)."""
    import warnings

    with warnings.catch_warnings():
        # torch 2.14 renames broadcast_buffers (a FutureWarning); 2.11, on the GPU machines, knows only it.
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
        return nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=bucket_mb,
            static_graph=static_graph,
            gradient_as_bucket_view=bucket_view,
            broadcast_buffers=broadcast_buffers,
        )


def _flag(value, key: str) -> bool:
    """A recipe boolean: YAML's true/false, or the strings an override may carry."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes"):
        return True
    if str(value).lower() in ("false", "0", "no"):
        return False
    raise SystemExit(f"{key} must be true or false, not {value!r}")


def _share(value, key: str) -> float:
    """A recipe fraction in [0, 1]."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        share = None
    if share is None or not 0.0 <= share <= 1.0:
        raise SystemExit(f"{key} must be a number from 0 to 1, not {value!r}")
    return share


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on BatchNorm parameters and biases (all 1-d tensors)."""
    decay, no_decay = [], []
    for param in model.parameters():
        (no_decay if param.ndim <= 1 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(total_steps: int, warmup_steps: int):
    """LR multiplier: linear warm-up from 1/warmup to 1, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def autocast_context(device: torch.device, amp: str):
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


# ---------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(model: nn.Module, loader, device, amp: str, limit_batches: int | None = None) -> dict:
    """Top-1, top-5 (%) and mean cross-entropy over the loader, summed over all ranks."""
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # correct@1, correct@5, loss sum, count
    for step, (images, labels) in enumerate(loader.epoch(0)):
        if limit_batches is not None and step >= limit_batches:
            break
        with autocast_context(device, amp):
            logits = model(images)
        logits = logits.float()
        top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
        hits = top5 == labels[:, None]
        totals += torch.stack(
            [
                hits[:, 0].sum(),
                hits.any(dim=1).sum(),
                nn.functional.cross_entropy(logits, labels, reduction="sum"),
                torch.tensor(labels.numel(), device=device),
            ]
        ).to(totals)
    if dist.is_initialized():
        dist.all_reduce(totals)
    model.train()
    count = max(1.0, float(totals[3]))
    return {
        "top1": 100 * float(totals[0]) / count,
        "top5": 100 * float(totals[1]) / count,
        "loss": float(totals[2]) / count,
    }


# -------------------------------------------------------------------------------------------- training
def train(args) -> dict:
    recipe = build_recipe(args)
    env, device = init_distributed(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if device.type == "cpu":
        torch.set_flush_denormal(True)  # denormal floats make CPU convolutions many times slower
    primary = env.rank == 0
    data_cfg, model_cfg = recipe["data"], recipe["model"]
    opt_cfg, sched_cfg, train_cfg = recipe["optimizer"], recipe["schedule"], recipe["train"]
    seed_everything(int(train_cfg["seed"]))
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    num_classes = int(model_cfg["num_classes"])
    cfg = DataConfig(
        data_dir=args.data_dir,
        backend=data_cfg["backend"],
        batch_size=int(data_cfg["batch_size"]),
        image_size=int(data_cfg["image_size"]),
        workers=int(data_cfg["workers"]),
        crop_scale=(float(data_cfg["min_crop_scale"]), 1.0),
        num_classes=num_classes,
        seed=int(train_cfg["seed"]),
        rank=env.rank,
        world_size=env.world_size,
        device=str(device),
        channels_last=bool(train_cfg["channels_last"]),
        prefetch_depth=int(data_cfg.get("prefetch_depth", 2)),
        prefetch_priority=_flag(data_cfg.get("prefetch_priority", True), "data.prefetch_priority"),
        pin_encoded=_flag(data_cfg.get("pin_encoded", True), "data.pin_encoded"),
        fused_crop=_flag(data_cfg.get("fused_crop", False), "data.fused_crop"),
        host_decode_share=_share(data_cfg.get("host_decode_share", 0.0), "data.host_decode_share"),
    )
    if cfg.prefetch_depth < 1:
        raise SystemExit(f"data.prefetch_depth must be 1 or more, not {cfg.prefetch_depth}")
    classes = None if cfg.backend == "synthetic" else check_layout(cfg.data_dir, num_classes)
    train_loader = build_loader(cfg, "train", classes)
    val_loader = build_loader(cfg, "val", classes)
    steps_per_epoch = train_loader.batches_per_epoch
    if args.steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, args.steps_per_epoch)
    epochs = int(sched_cfg["epochs"])
    total_steps = epochs * steps_per_epoch
    global_batch = cfg.batch_size * env.world_size

    model = resnet50(num_classes=num_classes, zero_init_residual=bool(model_cfg["zero_init_residual"]))
    weights = resolve_weights(args.pretrained, args.init_checkpoint)
    if weights is not None:
        load_weights(model, weights, reset_classifier=args.reset_classifier)
    model.to(device)
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)

    peak_lr = float(opt_cfg["lr_per_256"]) * global_batch / 256
    optimizer = torch.optim.SGD(
        parameter_groups(model, float(opt_cfg["weight_decay"])),
        lr=peak_lr,
        momentum=float(opt_cfg["momentum"]),
        nesterov=bool(opt_cfg.get("nesterov", False)),
    )
    warmup_steps = int(round(float(sched_cfg["warmup_epochs"]) * steps_per_epoch))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, warmup_steps))
    amp = str(train_cfg["amp"])
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")
    criterion = nn.CrossEntropyLoss(label_smoothing=float(train_cfg["label_smoothing"]))

    results_dir = pathlib.Path(args.results_dir)
    checkpoint_path = results_dir / CHECKPOINT_NAME
    start_epoch, start_batch, global_step, best_top1 = 0, 0, 0, 0.0
    resume_path = (
        checkpoint_path if args.resume == "auto" else (pathlib.Path(args.resume) if args.resume else None)
    )
    if resume_path is not None and (args.resume != "auto" or resume_path.is_file()):
        state = read_checkpoint(resume_path, trusted=True)
        if "optimizer" not in state:
            raise CheckpointError(
                f"{resume_path} holds weights only, not a training state (use --init-checkpoint)"
            )
        load_weights(model, resume_path, trusted=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
        start_epoch, start_batch = state["epoch"], state["batch_in_epoch"]
        global_step, best_top1 = state["global_step"], state["best_top1"]

    train_model = model
    if env.world_size > 1:
        train_model = distributed_model(model, device)
    if train_cfg["compile"]:
        train_model = torch.compile(train_model)

    results_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"),
        enabled=primary,
        total_steps=total_steps,
        desc="train",
        mlperf_benchmark="resnet",
    )
    logger.event("global_batch_size", global_batch)
    logger.event("opt_base_learning_rate", peak_lr)
    logger.event(
        "run_config",
        metadata={
            "world_size": env.world_size,
            "device": str(device),
            "amp": amp,
            "epochs": epochs,
            "steps_per_epoch": steps_per_epoch,
            "backend": cfg.backend,
            "resumed_at_step": global_step,
        },
    )

    def save(epoch: int, batch_in_epoch: int) -> None:
        if not primary:
            return
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "epoch": epoch,
            "batch_in_epoch": batch_in_epoch,
            "global_step": global_step,
            "best_top1": best_top1,
            "rng": rng_state(),
            "recipe": recipe,
            "classes": classes,
        }
        with atomic_write(checkpoint_path) as tmp:
            torch.save(state, tmp)

    metrics = {"top1": 0.0, "top5": 0.0}
    stop = False
    train_model.train()
    for epoch in range(start_epoch, epochs):
        epoch_start, seen = time.perf_counter(), 0
        for batch_in_epoch, (images, labels) in enumerate(
            train_loader.epoch(epoch, start_batch), start=start_batch
        ):
            if batch_in_epoch >= steps_per_epoch:
                break
            with autocast_context(device, amp):
                loss = criterion(train_model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            global_step += 1
            seen += labels.shape[0] * env.world_size
            if global_step % args.log_every == 0 or batch_in_epoch + 1 == steps_per_epoch:
                reading = {"loss": float(loss.detach()), "lr": scheduler.get_last_lr()[0], "epoch": epoch}
                logger.log(global_step, reading)
            logger.progress(global_step, labels.shape[0] * env.world_size, {"epoch": epoch})
            if args.checkpoint_every and global_step % args.checkpoint_every == 0:
                save(epoch, batch_in_epoch + 1)
            if args.exit_after_steps and global_step >= args.exit_after_steps:
                sys.stderr.flush()
                os._exit(137)  # as abrupt as a kill: no clean-up, no final checkpoint
        start_batch = 0
        train_seconds = time.perf_counter() - epoch_start
        metrics = evaluate(model, val_loader, device, amp)
        best_top1 = max(best_top1, metrics["top1"])
        logger.log(
            global_step,
            {**metrics, "epoch": epoch, "train_img_per_s": seen / max(train_seconds, 1e-9)},
            units={"top1": "%", "top5": "%", "train_img_per_s": " img/s"},
            phase="val",
        )
        logger.event("eval_accuracy", metrics["top1"] / 100, metadata={"epoch_num": epoch + 1})
        save(epoch + 1, 0)
        target = train_cfg.get("target_accuracy")
        if target is not None and metrics["top1"] >= float(target):
            logger.event("run_stop", metadata={"status": "success", "epoch_num": epoch + 1})
            stop = True
        if stop:
            break
    logger.close()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return {**metrics, "best_top1": best_top1, "global_step": global_step, "model": model}


def main(argv=None) -> None:
    args = parse_args(argv)
    try:
        result = train(args)
    except (DataError, CheckpointError) as e:
        raise SystemExit(f"error: {one_line(e)}") from None
    if get_dist_env().rank == 0:
        print(
            f"final val top1 {result['top1']:.2f}% top5 {result['top5']:.2f}% (best top1 {result['best_top1']:.2f}%)"
        )


if __name__ == "__main__":
    main()
