"""Train ResNet-50 v1.5 on an image folder (ImageNet layout) with a recipe; flags override the recipe.

    python -m resnet50.train --recipe configs/resnet50_1gpu_90ep.yaml --data-dir /data/imagenet
    torchrun --nproc-per-node 8 -m resnet50.train --recipe configs/resnet50_8gpu_90ep.yaml --data-dir ...

Every epoch ends with top-1/top-5 validation and a checkpoint (RESULTS_DIR/checkpoint.pt, written
atomically); ``--resume auto`` continues from it exactly: model, optimizer, grad scaler, LR schedule,
RNG states and the position in the epoch. RESULTS_DIR/metrics.jsonl and tensorboard/ hold the readings,
RESULTS_DIR/mlperf.log the run's MLPerf sequence (benchmark "resnet", checked by ``python -m zoo.mlperf``).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import zoo.cli
from zoo.checkpoints import CheckpointError
from zoo.cli import entry_point
from zoo.dist import get_dist_env
from zoo.io import atomic_write
from zoo.log import MetricsLogger
from zoo.mlperf import CLOSED_TARGETS, MLPerfLogger
from zoo.recipe import COMPILE_MODES
from zoo.rng import rng_state, set_rng_state
from zoo.torch import (
    autocast,
    check_replicas_agree,
    close_distributed,
    fast_math,
    init_distributed,
    seed_everything,
)

from resnet50.checkpoints import load_weights, read_checkpoint, resolve_weights
from resnet50.data import BACKENDS, DataConfig, DataError, build_loader, check_layout, one_line
from resnet50.data.verify import check_split
from resnet50.step import build_model, build_train_step, recipe_levers

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "resnet50_1gpu_90ep.yaml"
CHECKPOINT_NAME = "checkpoint.pt"
MLPERF_BENCHMARK = "resnet"
# Steps at the start of a run left out of its images/s (compilation, cuDNN autotuning, CUDA-graph
# capture), as benchmark.py leaves out its warm-up: the two report the same steady state.
THROUGHPUT_WARMUP_STEPS = 20

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
    "target_top1": "train.target_top1",
}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, then ResNet-50's); old spellings are one-line errors."""
    p = argparse.ArgumentParser(
        prog="python -m resnet50.train",
        description="Train ResNet-50 v1.5 (recipe YAML + flags; torchrun for several GPUs or nodes).",
        epilog="A flag left out keeps the recipe's value.",
    )
    zoo.cli.add_run_args(
        p, default_recipe=DEFAULT_RECIPE, data_help="folder with train/ and val/ ($DATA_DIR)"
    )
    zoo.cli.add_target_arg(p, "top1", unit="% validation top-1", example=75.9)
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
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--compile", nargs="?", const="default", choices=("none", *COMPILE_MODES), default=None,
        help="torch.compile mode (alone: default; none: eager; reduce-overhead adds CUDA graphs)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--steps-per-epoch", type=int, default=None,
        help="cap the batches per epoch (smoke runs); with --synthetic: the epoch's length (default 100)",
    )  # fmt: skip
    p.add_argument("--pretrained", default=None, help="start from a registry checkpoint (checkpoints.yaml)")
    p.add_argument("--init-checkpoint", default=None, help="start from the weights in this file")
    p.add_argument(
        "--reset-classifier", action="store_true", help="with --pretrained: new fc for new classes"
    )
    p.add_argument(
        "--checkpoint-every", type=int, default=0, help="also checkpoint every N steps (0: per epoch)"
    )
    p.add_argument(
        "--log-every", type=int, default=20, help="steps between loss readings (each one syncs; default 20)"
    )
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK if available)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU training)")
    p.add_argument(
        "--exit-after-steps", type=int, default=None, help="end abruptly after N steps (crash test)"
    )
    args = zoo.cli.parse_args(p, argv)
    if args.steps_per_epoch is not None and args.steps_per_epoch < 1:
        raise SystemExit(f"error: --steps-per-epoch must be a positive integer, not {args.steps_per_epoch}")
    if args.synthetic:
        args.data_backend = "synthetic"
    return args


def build_recipe(args) -> dict:
    """The recipe file with --set items and the flags of FLAG_TO_RECIPE applied."""
    return zoo.cli.recipe_from_args(args, FLAG_TO_RECIPE)


def warmup_cosine(total_steps: int, warmup_steps: int):
    """LR multiplier: linear warm-up from 1/warmup to 1, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


# ---------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader,
    device,
    amp: str,
    limit_batches: int | None = None,
    progress: MetricsLogger | None = None,
) -> dict:
    """Top-1, top-5 (%) and mean cross-entropy over the loader, summed over all ranks.

    ``progress``: a logger whose progress line shows batches done / total and images/s of all ranks.
    """
    model.eval()
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # correct@1, correct@5, loss sum, count
    for step, (images, labels) in enumerate(loader.epoch(0)):
        if limit_batches is not None and step >= limit_batches:
            break
        with autocast(device, amp):
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
        if progress is not None:
            progress.progress(step + 1, labels.shape[0] * world_size)
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
class Stopwatch:
    """Images per second over the steps counted after ``start()``; reads the clock only after the
    device has finished the queued work (at the start and at ``rate()``)."""

    def __init__(self, device, started: bool = False):
        self.device, self.images, self.began = torch.device(device), 0, None
        if started:
            self.start()

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self._synchronize()
        self.began, self.images = time.perf_counter(), 0

    def count(self, images: int, start_now: bool = False) -> None:
        """Count a finished step's images (if started); ``start_now``: start after this step instead."""
        if start_now:
            self.start()
        elif self.began is not None:
            self.images += images

    def rate(self) -> float | None:
        if self.began is None or self.images == 0:
            return None
        self._synchronize()
        return self.images / (time.perf_counter() - self.began)


def mlperf_log_path(results_dir: pathlib.Path, resumed: bool) -> pathlib.Path:
    """RESULTS_DIR/mlperf.log for a new run (an old one is replaced); a resumed run gets a file of its
    own (mlperf_resume1.log, 2, ...), since the compliance checker reads one run per file."""
    if not resumed:
        (results_dir / "mlperf.log").unlink(missing_ok=True)
        return results_dir / "mlperf.log"
    index = 1
    while (results_dir / f"mlperf_resume{index}.log").exists():
        index += 1
    return results_dir / f"mlperf_resume{index}.log"


def train(args) -> dict:
    recipe = build_recipe(args)
    results_dir = pathlib.Path(args.results_dir)
    checkpoint_path = results_dir / CHECKPOINT_NAME
    resume_path = zoo.cli.resolve_resume(args.resume, checkpoint_path)
    env, device = init_distributed(args.device)
    primary = env.rank == 0
    if args.threads:
        torch.set_num_threads(args.threads)
    fast_math(device)
    data_cfg, model_cfg = recipe["data"], recipe["model"]
    opt_cfg, sched_cfg, train_cfg = recipe["optimizer"], recipe["schedule"], recipe["train"]
    # a lever the recipe misspells (precision, compile mode, ...) ends the run here, before any data is read
    levers = recipe_levers(recipe)
    amp, channels_last = levers["amp"], levers["channels_last"]
    seed = int(train_cfg["seed"])
    seed_everything(seed)

    num_classes = int(model_cfg["num_classes"])
    cfg = DataConfig(
        data_dir=args.data_dir,
        backend=data_cfg["backend"],
        batch_size=int(data_cfg["batch_size"]),
        image_size=int(data_cfg["image_size"]),
        workers=int(data_cfg["workers"]),
        crop_scale=(float(data_cfg["min_crop_scale"]), 1.0),
        num_classes=num_classes,
        seed=seed,
        rank=env.rank,
        world_size=env.world_size,
        device=str(device),
        channels_last=channels_last,
        synthetic_batches=args.steps_per_epoch or 100,
    )
    classes = None if cfg.backend == "synthetic" else check_layout(cfg.data_dir, num_classes)
    if classes is not None and primary:
        # every validation image decoded now (those manifest.json does not vouch for): a corrupt one
        # ends the run here, not after an epoch of training
        check_split(cfg.data_dir, "val", classes)
    # Weights to start from and the state to resume are read here too, before anything is written.
    model = build_model(recipe)
    weights = resolve_weights(args.pretrained, args.init_checkpoint)
    if weights is not None:
        load_weights(model, weights, reset_classifier=args.reset_classifier)
    state = None
    if resume_path is not None:
        state = read_checkpoint(resume_path, trusted=True)
        if not isinstance(state, dict) or "optimizer" not in state:
            raise CheckpointError(
                f"{resume_path} holds no training state of resnet50.train (weights alone go to --init-checkpoint)"
            )
        load_weights(model, resume_path, trusted=True)
    # The MLPerf log starts once the command line, the recipe and the data folder have passed their
    # checks: bad input ends in one line and writes nothing into RESULTS_DIR.
    mlperf_path = mlperf_log_path(results_dir, resume_path is not None) if primary else None
    mlperf = MLPerfLogger(mlperf_path, MLPERF_BENCHMARK, enabled=primary)
    mlperf.cache_clear(False)  # the page cache is left as it is
    mlperf.init_start()
    train_loader = build_loader(cfg, "train", classes)
    val_loader = build_loader(cfg, "val", classes)
    steps_per_epoch = train_loader.batches_per_epoch
    if args.steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, args.steps_per_epoch)
    epochs = int(sched_cfg["epochs"])
    total_steps = epochs * steps_per_epoch
    global_batch = cfg.batch_size * env.world_size

    # the step benchmark.py times: optimizer, loss, precision, DDP and compilation from the recipe
    step = build_train_step(recipe, device, world_size=env.world_size, model=model)
    optimizer, scaler, peak_lr = step.optimizer, step.scaler, step.peak_lr
    warmup_steps = int(round(float(sched_cfg["warmup_epochs"]) * steps_per_epoch))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, warmup_steps))

    start_epoch, start_batch, global_step, best_top1 = 0, 0, 0, 0.0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
        start_epoch, start_batch = state["epoch"], state["batch_in_epoch"]
        global_step, best_top1 = state["global_step"], state["best_top1"]

    results_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=primary, total_steps=total_steps, desc="train"
    )
    val_progress = MetricsLogger(enabled=primary, total_steps=val_loader.batches_per_epoch, desc="val")
    if primary:
        print(
            f"{env.world_size} process(es) on {device}, amp {amp}, {epochs} epochs x {steps_per_epoch} steps, "
            f"global batch {global_batch}, {cfg.backend} input, compile {step.compile_mode or 'none'}"
            + (f", resumed at step {global_step}" if global_step else ""),
            flush=True,
        )
    mlperf.seed(seed)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(1)
    mlperf.train_samples(train_loader.samples_per_epoch)
    mlperf.eval_samples(val_loader.samples_per_epoch)
    mlperf.hyperparameters(
        opt_name="sgd",
        sgd_opt_base_learning_rate=peak_lr,
        sgd_opt_end_learning_rate=0.0,  # cosine decay to 0
        sgd_opt_momentum=float(opt_cfg["momentum"]),
        sgd_opt_weight_decay=float(opt_cfg["weight_decay"]),
        opt_learning_rate_warmup_epochs=float(sched_cfg["warmup_epochs"]),
        model_bn_span=cfg.batch_size,  # BatchNorm statistics per GPU
    )
    # MLPerf's status: success once validation top-1 reaches the run's target (else MLPerf's, 75.9%).
    target = train_cfg.get("target_top1")
    quality_target = float(target) if target is not None else 100 * CLOSED_TARGETS[MLPERF_BENCHMARK]

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
    steps_run = 0  # steps of this process's run (a resumed run warms up again)
    mlperf.init_stop()
    with mlperf:  # an exception from here on logs run_stop "aborted"
        mlperf.run_start()
        for epoch in range(start_epoch, epochs):
            mlperf.epoch_start(epoch + 1)
            # images/s from the first step after the run's warm-up to the end of the epoch
            clock = Stopwatch(device, started=steps_run >= THROUGHPUT_WARMUP_STEPS)
            for batch_in_epoch, (images, labels) in enumerate(
                train_loader.epoch(epoch, start_batch), start=start_batch
            ):
                if batch_in_epoch >= steps_per_epoch:
                    break
                loss = step(images, labels)
                scheduler.step()
                global_step += 1
                steps_run += 1
                clock.count(labels.shape[0] * env.world_size, start_now=steps_run == THROUGHPUT_WARMUP_STEPS)
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
            train_img_per_s = clock.rate()
            mlperf.epoch_stop(epoch + 1)
            mlperf.eval_start(epoch + 1)
            metrics = evaluate(model, val_loader, device, amp, progress=val_progress)
            mlperf.eval_stop(epoch + 1)
            mlperf.eval_accuracy(metrics["top1"] / 100, epoch + 1)
            best_top1 = max(best_top1, metrics["top1"])
            reading = {**metrics, "epoch": epoch}
            if train_img_per_s is not None:  # None: the epoch ended within the warm-up
                reading["train_img_per_s"] = train_img_per_s
            logger.log(
                global_step,
                reading,
                units={"top1": "%", "top5": "%", "train_img_per_s": " img/s"},
                phase="val",
            )
            save(epoch + 1, 0)
            if target is not None and metrics["top1"] >= float(target):
                break
        mlperf.run_stop("success" if best_top1 >= quality_target else "aborted")
    logger.close()
    check_replicas_agree(model, env)  # DDP keeps the weights equal; a difference is a bug, not noise
    close_distributed()
    return {**metrics, "best_top1": best_top1, "global_step": global_step, "model": model}


@entry_point
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
