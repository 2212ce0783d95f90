"""Train EfficientNet on an image folder (ImageNet layout) with a recipe; flags override the recipe.

    python -m efficientnet.train --recipe configs/efficientnet_b0_8gpu.yaml --data-dir /data/imagenet
    torchrun --nproc-per-node 8 -m efficientnet.train --recipe configs/efficientnet_b4_8gpu.yaml --data-dir ...

This module only wires: it builds the recipe's parts (data, model, training step, loggers), resumes,
runs ``engine.train_one_epoch`` per epoch, evaluates (``engine.evaluate``), checkpoints and stops at the
target. The recipe's ``run:`` section sets the length, the intervals and the target. RESULTS_DIR gets
``checkpoint.pt`` (``zoo.torch.save_training_checkpoint``; ``--resume auto`` continues it exactly: model,
optimizer, grad scaler, LR schedule, weight average, RNG states and the position in the epoch),
``metrics.jsonl`` and ``tensorboard/``. EfficientNet has no MLPerf benchmark, so no ``mlperf.log``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import pathlib
import sys
from typing import TYPE_CHECKING

import zoo.cli
from zoo.cli import Preemption, entry_point
from zoo.dist import get_dist_env
from zoo.errors import UserError
from zoo.imagenet_loaders.layout import recipe_classes
from zoo.log import MetricsLogger
from zoo.recipe import COMPILE_MODES, RunConfig, run_config
from zoo.retention import improves
from zoo.rng import rng_state, set_rng_state
from zoo.torch import (
    CHECKPOINT_NAME,
    TRAINING_STATE_FIELDS,
    check_replicas_agree,
    close_distributed,
    fast_math,
    init_distributed,
    load_training_checkpoint,
    save_training_checkpoint,
    seed_everything,
)

from efficientnet import DEFAULT_RECIPE

if TYPE_CHECKING:
    from efficientnet.engine import TrainState

# What a checkpoint of this script holds besides zoo's fields (--resume refuses a file without them).
STATE_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler", "step_in_epoch", "best", "classes", "average")

# flag name -> dotted recipe key, besides zoo.cli.RUN_FLAGS (--amp, --batch-size, --epochs, ...);
# a flag left unset keeps the recipe's value.
FLAG_TO_RECIPE = {
    "data_backend": "data.backend",
    "image_size": "data.image_size",
    "workers": "data.workers",
    "min_crop_scale": "data.min_crop_scale",
    "augment": "data.augment",
    "variant": "model.variant",
    "wide_se": "model.wide_se",
    "width": "model.width",
    "num_classes": "model.num_classes",
    "optimizer": "optimizer.name",
    "lr_per_256": "optimizer.lr_per_256",
    "lr_scaling": "optimizer.lr_scaling",
    "momentum": "optimizer.momentum",
    "weight_decay": "optimizer.weight_decay",
    "warmup_epochs": "schedule.warmup_epochs",
    "label_smoothing": "train.label_smoothing",
    "mixup": "train.mixup",
    "cutmix": "train.cutmix",
    "ema_decay": "train.ema_decay",
    "channels_last": "train.channels_last",
    "compile": "train.compile",
    "checkpoint_every": "run.checkpoint_every",
}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, then EfficientNet's); old spellings are one-line errors."""
    from zoo.imagenet_loaders import BACKENDS

    p = argparse.ArgumentParser(
        prog="python -m efficientnet.train",
        description="Train EfficientNet (recipe YAML + flags; torchrun for several GPUs or nodes).",
        epilog="A flag left out keeps the recipe's value.",
    )
    zoo.cli.add_run_args(
        p, default_recipe=DEFAULT_RECIPE, data_help="folder with train/ and val/ ($DATA_DIR)"
    )
    zoo.cli.add_target_arg(p, "top1", unit="% validation top-1", example=77.6)
    p.add_argument("--batch-size", type=int, default=None, help="images per GPU (run.batch_per_gpu)")
    p.add_argument("--accumulation", type=int, default=None, help="micro-steps per optimizer step")
    p.add_argument("--epochs", type=int, default=None, help="the run's length (run.epochs)")
    p.add_argument(
        "--steps", type=int, default=None, help="the run's length in optimizer steps, instead of epochs"
    )
    p.add_argument(
        "--log-every",
        type=int,
        default=None,
        help="steps between loss readings (each one syncs; run.log_every)",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--checkpoint-every", type=int, default=None, metavar="N",
        help="checkpoint every N steps instead of the recipe's run.checkpoint_every",
    )  # fmt: skip
    p.add_argument("--data-backend", choices=BACKENDS, default=None)
    p.add_argument("--synthetic", action="store_true", help="same as --data-backend synthetic")
    p.add_argument("--image-size", type=int, default=None, help="training crop size (B0 224, B4 380)")
    p.add_argument("--workers", type=int, default=None, help="data loader workers per process")
    p.add_argument("--min-crop-scale", type=float, default=None, help="smallest random-resized-crop area")
    p.add_argument("--augment", choices=("randaugment", "autoaugment"), default=None, help="data.augment")
    p.add_argument("--variant", choices=("b0", "b1", "b2", "b3", "b4"), default=None, help="model.variant")
    p.add_argument("--wide-se", action=argparse.BooleanOptionalAction, default=None, help="WideSE blocks")
    p.add_argument("--width", type=float, default=None, help="width multiplier instead of the variant's")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--optimizer", choices=("rmsprop", "sgd"), default=None, help="optimizer.name")
    p.add_argument("--lr-per-256", type=float, default=None, help="peak LR at a global batch of 256")
    p.add_argument(
        "--lr-scaling", choices=("linear", "sqrt", "none"), default=None,
        help="how the peak LR follows the global batch (optimizer.lr_scaling)",
    )  # fmt: skip
    p.add_argument("--momentum", type=float, default=None)
    p.add_argument("--weight-decay", type=float, default=None, help="not applied to BatchNorm and biases")
    p.add_argument("--warmup-epochs", type=float, default=None)
    p.add_argument("--label-smoothing", type=float, default=None)
    p.add_argument("--mixup", type=float, default=None, help="mixup Beta alpha (0: off)")
    p.add_argument("--cutmix", type=float, default=None, help="CutMix Beta alpha (0: off)")
    p.add_argument("--ema-decay", type=float, default=None, help="EMA of the weights (train.ema_decay)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--compile", nargs="?", const="default", choices=("none", *COMPILE_MODES), default=None,
        help="torch.compile mode (alone: default; none: eager; reduce-overhead adds CUDA graphs)",
    )  # fmt: skip
    p.add_argument(
        "--steps-per-epoch", type=int, default=None,
        help="cap the steps per epoch (smoke runs); with --synthetic: the epoch's length (default 100)",
    )  # fmt: skip
    p.add_argument("--pretrained", default=None, help="start from a registry checkpoint (checkpoints.yaml)")
    p.add_argument("--init-checkpoint", default=None, help="start from the weights in this file")
    p.add_argument(
        "--reset-classifier", action="store_true", help="with --pretrained: a new classifier for new classes"
    )
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK if available)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU training)")
    p.add_argument(
        "--exit-after-steps", type=int, default=None, help="end abruptly after N steps (crash test)"
    )
    args = zoo.cli.parse_args(p, argv)
    if args.steps_per_epoch is not None and args.steps_per_epoch < 1:
        raise UserError(f"--steps-per-epoch must be a positive integer, not {args.steps_per_epoch}")
    if args.synthetic:
        args.data_backend = "synthetic"
    if args.checkpoint_every is not None:
        args.checkpoint_every = f"{args.checkpoint_every} steps"
    if args.steps is not None:
        args.set = ["run.epochs=null", *args.set]  # --steps counts the run in steps instead of epochs
    return args


def build_recipe(args) -> dict:
    """The recipe file with --set items, the shared run: flags and those of FLAG_TO_RECIPE applied."""
    return zoo.cli.recipe_from_args(args, FLAG_TO_RECIPE)


def run_length(run: RunConfig, steps_per_epoch: int) -> tuple[int, int]:
    """(epochs, optimizer steps) of the run: run.epochs whole epochs, or run.steps (its last epoch cut short)."""
    if run.steps is not None:
        return math.ceil(run.steps / steps_per_epoch), run.steps
    return run.epochs, run.epochs * steps_per_epoch


def checkpoint_state(step, scheduler, state: TrainState, recipe: dict, classes) -> dict:
    """What checkpoint.pt holds (STATE_FIELDS): zoo's training-state fields and this model's."""
    return {
        "model": step.model.state_dict(),
        "optimizer": step.optimizer.state_dict(),
        "rng": rng_state(),
        "epoch": state.epoch,
        "step": state.step,
        "recipe": recipe,
        "scheduler": scheduler.state_dict(),
        "scaler": step.scaler.state_dict(),
        "step_in_epoch": state.step_in_epoch,
        "best": state.best,
        "classes": classes,
        "average": None if step.average is None else step.average.model.state_dict(),
    }


def restore(saved: dict, step, scheduler, state: TrainState) -> None:
    """Continue a checkpoint's run: optimizer, LR schedule, grad scaler, RNG and the run's position
    (the model's weights were loaded before the step wrapped it)."""
    step.optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    step.scaler.load_state_dict(saved["scaler"])
    set_rng_state(saved["rng"])
    if step.average is not None:
        if saved["average"] is None:
            raise UserError("the checkpoint has no weight average but the recipe keeps one (train.ema_decay)")
        step.average.model.load_state_dict(saved["average"])
    state.epoch, state.step, state.step_in_epoch = saved["epoch"], saved["step"], saved["step_in_epoch"]
    step.steps_done = state.step
    state.best = dict(saved["best"])


def evaluate_epoch(step, val_loader, device, run: RunConfig, state: TrainState, logger, progress) -> dict:
    """Validation after epoch ``state.epoch`` (the EMA weights where the recipe keeps them): top-1/top-5
    logged, the best kept."""
    from efficientnet.engine import evaluate

    metrics = evaluate(step.eval_model, val_loader, device, run.precision, progress=progress)
    state.best["top1"] = max(state.best.get("top1", 0.0), metrics["top1"])
    logger.log(state.step, {**metrics, "epoch": state.epoch}, phase="eval")
    return metrics


def due_after_epoch(interval, state: TrainState) -> bool:
    """Whether an interval counted in epochs ends with the epoch just finished."""
    return interval is not None and interval.unit == "epochs" and interval.due(state.epoch, state.step)


def train(args) -> dict:
    """Build the run from the recipe and the flags, resume, train epoch by epoch, evaluate, checkpoint,
    stop at the target; returns the last validation metrics, the best top-1 and the trained model."""
    from efficientnet.variants import variant_spec

    # The recipe, the results folder, the resume and the data folder's layout are checked before the
    # framework is imported: a mistake there ends in one line at once.
    recipe = build_recipe(args)
    run = run_config(recipe, args.recipe)
    run.require_epoch_evaluations("EfficientNet")
    variant_spec(str(recipe["model"]["variant"]))
    results_dir = pathlib.Path(args.results_dir)
    resume_path = zoo.cli.resolve_resume(args.resume, results_dir / CHECKPOINT_NAME)
    classes = recipe_classes(recipe, args.data_dir)

    import torch
    from zoo.imagenet_loaders import DataConfig, build_loader
    from zoo.imagenet_loaders.verify import check_split

    from efficientnet.checkpoints import (
        default_preprocessing,
        extract_state_dict,
        load_model_state,
        load_weights,
        resolve_weights,
    )
    from efficientnet.engine import Throughput, TrainState, train_one_epoch
    from efficientnet.step import (
        accumulation,
        build_model,
        build_train_step,
        global_batch,
        lr_schedule,
        recipe_levers,
    )

    env, device = init_distributed(args.device)
    primary = env.rank == 0
    if args.threads:
        torch.set_num_threads(args.threads)
    fast_math(device)
    recipe_levers(recipe)  # a misspelt lever ends the run here, before any data is read
    seed_everything(run.seed)
    data = DataConfig.from_recipe(
        recipe, device, accumulation=accumulation(recipe, env.world_size), data_dir=args.data_dir,
        rank=env.rank, world_size=env.world_size,
        synthetic_batches=args.steps_per_epoch or 100,
    )  # fmt: skip
    data = dataclasses.replace(data, val_preprocessing=default_preprocessing(data.image_size))
    if classes is not None and primary:
        # every validation image decoded now (those manifest.json does not vouch for): a corrupt one
        # ends the run here, not after an epoch of training
        check_split(data.data_dir, "val", classes)
    # Weights to start from and the state to resume are read here too, before anything is written.
    model = build_model(recipe)
    weights = resolve_weights(args.pretrained, args.init_checkpoint)
    if weights is not None:
        load_weights(model, weights, reset_classifier=args.reset_classifier)
    saved = None
    if resume_path is not None:
        saved = load_training_checkpoint(resume_path, STATE_FIELDS, "an EfficientNet training checkpoint")
        load_model_state(model, extract_state_dict(saved), resume_path)
    train_loader = build_loader(data, "train", classes)
    val_loader = build_loader(dataclasses.replace(data, batch_size=run.batch_per_gpu), "val", classes)
    steps_per_epoch = min(train_loader.batches_per_epoch, args.steps_per_epoch or math.inf)
    epochs, total_steps = run_length(run, steps_per_epoch)
    # the step the benchmark times: optimizer, loss, precision, DDP and compilation from the recipe
    step = build_train_step(recipe, device, world_size=env.world_size, model=model)
    scheduler = lr_schedule(recipe, step.optimizer, steps_per_epoch, total_steps)
    state = TrainState()
    if saved is not None:
        restore(saved, step, scheduler, state)

    results_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=primary, total_steps=total_steps, desc="train"
    )
    val_progress = MetricsLogger(enabled=primary, total_steps=val_loader.batches_per_epoch, desc="eval")
    if primary:
        print(
            f"{env.world_size} process(es) on {device}, {run.precision}, {epochs} epochs x {steps_per_epoch} steps, "
            f"global batch {global_batch(recipe, env.world_size)}, {data.backend} input, compile {step.compile_mode or 'none'}"
            + (f", resumed at step {state.step}" if state.step else ""),
            flush=True,
        )

    def save(best: bool = False) -> None:
        if primary:  # best: this epoch's evaluation beat the earlier ones (RESULTS_DIR/best.pt)
            save_training_checkpoint(
                results_dir / CHECKPOINT_NAME, checkpoint_state(step, scheduler, state, recipe, classes),
                keep=run.keep_checkpoints, mark_best=best,
            )  # fmt: skip

    preemption = Preemption(env.world_size, device)  # SIGTERM: checkpoint after the step, then exit 143

    def after_step(state: TrainState) -> None:
        every = run.checkpoint_every
        if every is not None and every.unit == "steps" and every.due(state.epoch, state.step):
            save()
        if preemption.requested(state.step):
            save()  # mid-epoch: --resume auto continues with the next batch of this epoch
            preemption.stop()
        if args.exit_after_steps and state.step >= args.exit_after_steps:
            sys.stderr.flush()
            os._exit(137)  # the crash test's kill: no clean-up, no final checkpoint (not a user error)

    metrics = {"top1": 0.0, "top5": 0.0}
    throughput = Throughput(device)  # a resumed run warms up again
    with preemption:
        while state.epoch < epochs:
            train_one_epoch(
                step, scheduler, train_loader, state, logger, throughput, steps_per_epoch=steps_per_epoch,
                last_step=total_steps, log_every=run.log_every, after_step=after_step,
            )  # fmt: skip
            evaluated = state.epoch == epochs or due_after_epoch(run.eval_every, state)
            best_before = state.best.get(run.target.metric)
            if evaluated:
                metrics = evaluate_epoch(step, val_loader, device, run, state, logger, val_progress)
            improved = evaluated and improves(run.target.metric, metrics[run.target.metric], best_before)
            stop = state.epoch == epochs or (evaluated and run.target.reached(metrics["top1"]))
            if stop or improved or due_after_epoch(run.checkpoint_every, state):
                save(best=improved)
            if stop:
                break
    logger.close()
    check_replicas_agree(step.model, env)  # DDP keeps the weights equal; a difference is a bug, not noise
    close_distributed()
    return {**metrics, "best_top1": state.best.get("top1", 0.0), "step": state.step, "model": step.model}


@entry_point
def main(argv=None) -> None:
    args = parse_args(argv)
    result = train(args)
    if get_dist_env().rank == 0:
        print(
            f"final val top1 {result['top1']:.2f}% top5 {result['top5']:.2f}% (best top1 {result['best_top1']:.2f}%)"
        )


if __name__ == "__main__":
    main()
