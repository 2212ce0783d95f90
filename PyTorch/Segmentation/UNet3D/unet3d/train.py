"""Train the 3D U-Net on a prepared KiTS19 folder (or synthetic volumes) with a recipe; flags override it.

    python -m unet3d.train --recipe configs/unet3d_kits19_1gpu.yaml --data-dir /data/kits19_npy
    torchrun --nproc-per-node 8 -m unet3d.train --recipe configs/unet3d_kits19_8gpu.yaml --data-dir ...

This module only wires: it builds the recipe's parts (cases, patches, training step, loggers), resumes,
runs ``engine.train_one_epoch`` per epoch, evaluates (``engine.evaluate``) from ``eval.start_epoch`` every
``run.eval_every``, checkpoints and stops at the Dice target. RESULTS_DIR gets ``checkpoint.pt``
(``--resume auto`` continues it exactly: model, optimizer, grad scaler, LR schedule, RNG states and the
position in the epoch), ``metrics.jsonl``, ``tensorboard/`` and ``mlperf.log`` (benchmark "unet3d"; a
resumed run writes ``mlperf_resume<N>.log``).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
from typing import TYPE_CHECKING

import zoo.cli
from zoo.cli import Preemption, entry_point
from zoo.dist import get_dist_env
from zoo.errors import UserError
from zoo.log import MetricsLogger
from zoo.mlperf import CLOSED_TARGETS, MLPerfLogger, log_path
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

from unet3d import DEFAULT_RECIPE
from unet3d.synthetic import synthetic_cases

if TYPE_CHECKING:
    from unet3d.data import PatchLoader
    from unet3d.engine import TrainState

MLPERF_BENCHMARK = "unet3d"
STATE_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler", "step_in_epoch", "best")

FLAG_TO_RECIPE = {
    "width": "model.width",
    "levels": "model.levels",
    "oversampling": "data.oversampling",
    "lr": "optimizer.lr",
    "warmup_epochs": "schedule.warmup_epochs",
    "start_eval_epoch": "eval.start_epoch",
    "compile": "train.compile",
    "channels_last": "train.channels_last",
    "checkpoint_every": "run.checkpoint_every",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m unet3d.train",
        description="Train the MLPerf 3D U-Net on KiTS19 (recipe YAML + flags; torchrun for several GPUs or nodes).",
        epilog="A flag left out keeps the recipe's value.",
    )
    zoo.cli.add_run_args(
        p, default_recipe=DEFAULT_RECIPE, data_help="prepared KiTS19 folder with dataset.json ($DATA_DIR)"
    )
    zoo.cli.add_target_arg(p, "dice", unit="mean Dice of kidney and tumour, a fraction", example=0.908)
    p.add_argument("--batch-size", type=int, default=None, help="patches per GPU (run.batch_per_gpu)")
    p.add_argument("--accumulation", type=int, default=None, help="micro-steps per optimizer step")
    p.add_argument("--epochs", type=int, default=None, help="the run's length (run.epochs)")
    p.add_argument("--steps", type=int, default=None, help="the run's length in optimizer steps instead")
    p.add_argument("--log-every", type=int, default=None, help="steps between loss readings (run.log_every)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--checkpoint-every", type=int, default=None, metavar="N",
        help="checkpoint every N steps instead of the recipe's run.checkpoint_every",
    )  # fmt: skip
    p.add_argument("--synthetic", action="store_true", help="organ-like volumes made in memory, no data dir")
    p.add_argument("--width", type=int, default=None, help="channels at full resolution (model.width)")
    p.add_argument(
        "--levels", type=int, default=None, help="resolutions before the bottleneck (model.levels)"
    )
    p.add_argument("--oversampling", type=float, default=None, help="share of foreground patches")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (optimizer.lr)")
    p.add_argument("--warmup-epochs", type=float, default=None)
    p.add_argument("--start-eval-epoch", type=int, default=None, help="first evaluation (eval.start_epoch)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--compile", nargs="?", const="default", choices=("none", *COMPILE_MODES), default=None,
        help="torch.compile mode (alone: default; none: eager; reduce-overhead adds CUDA graphs)",
    )  # fmt: skip
    p.add_argument("--steps-per-epoch", type=int, default=None, help="cap the steps per epoch (smoke runs)")
    p.add_argument("--init-checkpoint", default=None, help="start from the weights in this file")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK if available)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU training)")
    p.add_argument(
        "--exit-after-steps", type=int, default=None, help="end abruptly after N steps (crash test)"
    )
    args = zoo.cli.parse_args(p, argv)
    if args.steps_per_epoch is not None and args.steps_per_epoch < 1:
        raise UserError(f"--steps-per-epoch must be a positive integer, not {args.steps_per_epoch}")
    if args.checkpoint_every is not None:
        args.checkpoint_every = f"{args.checkpoint_every} steps"
    return args


def build_recipe(args) -> dict:
    return zoo.cli.recipe_from_args(args, FLAG_TO_RECIPE)


def run_length(run: RunConfig, steps_per_epoch: int) -> tuple[int, int]:
    """(epochs, optimizer steps) of the run: run.epochs whole epochs, or run.steps (its last epoch cut short)."""
    if run.steps is not None:
        return math.ceil(run.steps / steps_per_epoch), run.steps
    return run.epochs, run.epochs * steps_per_epoch


def training_cases(recipe: dict, args) -> dict:
    """{"train": ..., "val": ...}: the prepared folder's cases, or synthetic ones (--synthetic)."""
    from unet3d.data import load_cases, synthetic_split
    from unet3d.step import patch_shape

    data_cfg = recipe["data"]
    if args.synthetic:
        shape = tuple(data_cfg["synthetic_shape"])
        made = synthetic_cases(
            int(data_cfg["synthetic_cases"]), shape, patch_shape(recipe), seed=run_config(recipe).seed
        )
        return synthetic_split(made, int(data_cfg["synthetic_val_cases"]))
    if not args.data_dir:
        raise UserError("give --data-dir (a folder prepared by scripts/download_data.sh) or --synthetic")
    return load_cases(args.data_dir)


def checkpoint_state(step, scheduler, state: TrainState, recipe: dict) -> dict:
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
    }


def restore(saved: dict, step, scheduler, state: TrainState) -> None:
    step.optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    step.scaler.load_state_dict(saved["scaler"])
    set_rng_state(saved["rng"])
    state.epoch, state.step, state.step_in_epoch = saved["epoch"], saved["step"], saved["step_in_epoch"]
    state.best = dict(saved["best"])


def log_run_settings(
    mlperf: MLPerfLogger, recipe: dict, patches: PatchLoader, val_cases: dict, world_size: int
) -> None:
    """The MLPerf keys of the run's settings (the closed unet3d rules' list)."""
    from unet3d.step import patch_shape

    run, optimizer = run_config(recipe), recipe["optimizer"]
    patch = list(patch_shape(recipe))
    mlperf.seed(run.seed)
    mlperf.global_batch_size(run.batch_per_gpu * run.accumulation * world_size)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(patches.samples_per_epoch)
    mlperf.eval_samples(len(val_cases))
    mlperf.hyperparameters(
        opt_name="sgd",
        opt_base_learning_rate=float(optimizer["lr"]),
        opt_momentum=float(optimizer["momentum"]),
        opt_learning_rate_warmup_epochs=float(recipe["schedule"]["warmup_epochs"]),
        opt_initial_learning_rate=float(optimizer["init_lr"]),
        opt_learning_rate_decay_boundary_epochs=[],
        opt_learning_rate_decay_factor=1.0,
        opt_weight_decay=float(optimizer["weight_decay"]),
        oversampling=float(recipe["data"]["oversampling"]),
        training_input_shape=patch,
        validation_input_shape=patch,
        validation_overlap=float(recipe["eval"]["overlap"]),
    )


def evaluation_due(recipe: dict, run: RunConfig, epoch: int, last: bool) -> bool:
    """Whether epoch ``epoch`` (1-based, just finished) ends with an evaluation: from eval.start_epoch every
    run.eval_every epochs (MLPerf's start_eval_at and evaluate_every), and after the last epoch."""
    start = int(recipe["eval"]["start_epoch"])
    if last:
        return True
    if run.eval_every is None or epoch < start:
        return False
    return (epoch - start) % run.eval_every.count == 0


def train(args) -> dict:
    """Build the run, resume, train epoch by epoch, evaluate, checkpoint, stop at the target; returns the
    last evaluation's metrics, the best Dice and the trained model."""
    # The recipe and --resume are checked before torch is imported: bad input ends in a second.
    recipe = build_recipe(args)
    run = run_config(recipe, args.recipe)
    run.require_epoch_evaluations("the 3D U-Net")
    results_dir = pathlib.Path(args.results_dir)
    resume_path = zoo.cli.resolve_resume(args.resume, results_dir / CHECKPOINT_NAME)

    import torch

    from unet3d.checkpoints import load_model_state
    from unet3d.data import PatchLoader
    from unet3d.engine import Throughput, TrainState, evaluate, train_one_epoch
    from unet3d.step import build_model, build_train_step, lr_schedule, patch_shape, recipe_levers

    recipe_levers(recipe)  # a misspelt lever ends the run here, before any data is read
    patch = patch_shape(recipe)
    env, device = init_distributed(args.device)
    primary = env.rank == 0
    if args.threads:
        torch.set_num_threads(args.threads)
    fast_math(device)
    seed_everything(run.seed)  # before the model: its initial weights come from the seed
    model = build_model(recipe)
    cases = training_cases(recipe, args)
    patches = PatchLoader(
        cases["train"], patch, run.batch_per_gpu * run.accumulation, float(recipe["data"]["oversampling"]),
        run.seed, env.rank, env.world_size, device,
    )  # fmt: skip
    if args.init_checkpoint:
        load_model_state(model, args.init_checkpoint, flag="--init-checkpoint")
    saved = None
    if resume_path is not None:
        saved = load_training_checkpoint(resume_path, STATE_FIELDS, "a 3D U-Net training checkpoint")
        load_model_state(model, saved, flag=f"--resume {resume_path}")
    # The MLPerf log starts once the command line, the recipe and the data have passed their checks.
    mlperf = MLPerfLogger(
        log_path(results_dir, saved is not None) if primary else None, MLPERF_BENCHMARK, enabled=primary
    )
    mlperf.cache_clear(False)
    mlperf.init_start()
    steps_per_epoch = min(patches.batches_per_epoch, args.steps_per_epoch or math.inf)
    epochs, total_steps = run_length(run, steps_per_epoch)
    step = build_train_step(recipe, device, world_size=env.world_size, model=model)
    scheduler = lr_schedule(recipe, step.optimizer, steps_per_epoch)
    state = TrainState()
    if saved is not None:
        restore(saved, step, scheduler, state)

    results_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=primary, total_steps=total_steps, desc="train"
    )
    val_progress = MetricsLogger(enabled=primary, total_steps=len(cases["val"]), desc="eval")
    if primary:
        print(
            f"{env.world_size} process(es) on {device}, {run.precision}, {epochs} epochs x {steps_per_epoch} steps, "
            f"{len(cases['train'])} training / {len(cases['val'])} evaluation cases, patch {patch}, "
            f"global batch {run.batch_per_gpu * run.accumulation * env.world_size}"
            + (f", resumed at step {state.step}" if state.step else ""),
            flush=True,
        )
    log_run_settings(mlperf, recipe, patches, cases["val"], env.world_size)

    def save(best: bool = False) -> None:
        if primary:  # best: this epoch's evaluation beat the earlier ones (RESULTS_DIR/best.pt)
            save_training_checkpoint(
                results_dir / CHECKPOINT_NAME, checkpoint_state(step, scheduler, state, recipe),
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

    metrics = {"dice": 0.0}
    throughput = Throughput(device)
    target = run.target.value if run.target.value is not None else CLOSED_TARGETS[MLPERF_BENCHMARK]
    eval_cfg = recipe["eval"]
    mlperf.init_stop()
    with preemption, mlperf:  # an exception from here on logs run_stop "aborted"
        mlperf.run_start()
        while state.epoch < epochs:
            mlperf.epoch_start(state.epoch + 1)
            train_one_epoch(
                step, scheduler, patches, state, logger, throughput, steps_per_epoch=steps_per_epoch,
                last_step=total_steps, log_every=run.log_every, after_step=after_step,
            )  # fmt: skip
            mlperf.epoch_stop(state.epoch)
            evaluated = evaluation_due(recipe, run, state.epoch, state.epoch == epochs)
            best_before = state.best.get("dice")
            if evaluated:
                mlperf.eval_start(state.epoch)
                metrics = evaluate(
                    step.model, cases["val"], device, run.precision, patch=patch, overlap=float(eval_cfg["overlap"]),
                    window_batch=int(eval_cfg["window_batch"]), progress=val_progress,
                )  # fmt: skip
                mlperf.eval_accuracy(metrics["dice"], state.epoch)
                mlperf.eval_stop(state.epoch)
                state.best["dice"] = max(state.best.get("dice", 0.0), metrics["dice"])
                logged = {k: metrics[k] for k in ("dice", "loss", "samples")}
                logger.log(state.step, {**logged, "epoch": state.epoch}, phase="eval")
                if primary:
                    print(
                        f"epoch {state.epoch}: Dice kidney {metrics['dice_kidney']:.4f} tumour {metrics['dice_tumour']:.4f}",
                        flush=True,
                    )
            stop = state.epoch == epochs or (evaluated and run.target.reached(metrics["dice"]))
            improved = evaluated and improves("dice", metrics["dice"], best_before)
            every = run.checkpoint_every
            if (
                stop
                or improved
                or (every is not None and every.unit == "epochs" and every.due(state.epoch, state.step))
            ):
                save(best=improved)
            if stop:
                break
        mlperf.run_stop("success" if state.best.get("dice", 0.0) >= target else "aborted")
    logger.close()
    check_replicas_agree(step.model, env)  # DDP keeps the weights equal; a difference is a bug, not noise
    close_distributed()
    return {**metrics, "best_dice": state.best.get("dice", 0.0), "step": state.step, "model": step.model}


@entry_point
def main(argv=None) -> None:
    args = parse_args(argv)
    result = train(args)
    if get_dist_env().rank == 0:
        print(f"final mean Dice {result['dice']:.4f} (best {result['best_dice']:.4f})")


if __name__ == "__main__":
    main()
