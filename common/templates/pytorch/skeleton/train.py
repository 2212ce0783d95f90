"""Train the model with a recipe; flags override the recipe.

    python -m skeleton.train --recipe configs/tiny_cpu.yaml --data-dir data/skeleton
    torchrun --nproc-per-node 2 -m skeleton.train ...        (scripts/train.sh --gpus 2 does this)

This module only wires: it builds the recipe's parts (data, model, training step, logger), resumes,
runs ``engine.train_one_epoch`` per epoch, evaluates (``engine.evaluate``), checkpoints and stops at the
target. RESULTS_DIR gets ``checkpoint.pt`` (``zoo.torch.save_training_checkpoint``; ``--resume auto``
continues it exactly), ``metrics.jsonl`` and ``tensorboard/``. A model with an MLPerf benchmark also
opens ``zoo.mlperf.MLPerfLogger(zoo.mlperf.log_path(results_dir, resumed), BENCHMARK)`` here.
"""

from __future__ import annotations

import argparse
import math
import pathlib
from typing import TYPE_CHECKING

import zoo.cli
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.log import MetricsLogger
from zoo.recipe import run_config
from zoo.retention import improves
from zoo.rng import rng_state, set_rng_state
from zoo.torch import (
    CHECKPOINT_NAME,
    TRAINING_STATE_FIELDS,
    check_replicas_agree,
    close_distributed,
    init_distributed,
    load_training_checkpoint,
    save_training_checkpoint,
    seed_everything,
)

from skeleton import DEFAULT_RECIPE

if TYPE_CHECKING:
    from skeleton.engine import TrainState
    from skeleton.step import TrainStep

# What a checkpoint of this script holds besides zoo's fields (--resume refuses a file without them).
STATE_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler", "step_in_epoch", "best")
# flag name -> dotted recipe key, besides zoo.cli.RUN_FLAGS (--amp, --batch-size, --epochs, ...).
FLAG_TO_RECIPE = {"lr": "optimizer.lr", "hidden": "model.hidden"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m skeleton.train",
        description="Train the model (recipe YAML + flags; torchrun for several GPUs).",
    )
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, data_help="prepared data folder ($DATA_DIR)")
    zoo.cli.add_target_arg(p, "top1", unit="% validation top-1", example=95.0)
    p.add_argument("--batch-size", type=int, help="samples per GPU and micro-step (run.batch_per_gpu)")
    p.add_argument("--accumulation", type=int, help="micro-steps per optimizer step (run.accumulation)")
    p.add_argument("--epochs", type=int, help="the run's length in epochs (run.epochs)")
    p.add_argument("--steps", type=int, help="the run's length in optimizer steps (run.steps)")
    p.add_argument("--log-every", type=int, help="steps between loss readings (run.log_every)")
    p.add_argument("--seed", type=int, help="the run's seed (run.seed)")
    p.add_argument("--lr", type=float, help="peak learning rate (optimizer.lr)")
    p.add_argument("--hidden", type=int, help="hidden width (model.hidden)")
    p.add_argument(
        "--synthetic", action="store_true", help="random samples of the real shapes, no data folder"
    )
    p.add_argument("--device", help="cuda / cpu (default: cuda:LOCAL_RANK where there is one)")
    p.add_argument("--threads", type=int, help="CPU threads for torch")
    return zoo.cli.parse_args(p, argv)


def checkpoint_state(step: TrainStep, scheduler, state: TrainState, recipe: dict) -> dict:
    """What checkpoint.pt holds (STATE_FIELDS): zoo's training-state fields and this model's."""
    return {
        "model": step.model.state_dict(), "optimizer": step.optimizer.state_dict(), "rng": rng_state(),
        "epoch": state.epoch, "step": state.step, "recipe": recipe, "scheduler": scheduler.state_dict(),
        "scaler": step.scaler.state_dict(), "step_in_epoch": state.step_in_epoch, "best": state.best,
    }  # fmt: skip


def restore(saved: dict, step: TrainStep, scheduler, state: TrainState) -> None:
    step.model.load_state_dict(saved["model"])
    step.optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    step.scaler.load_state_dict(saved["scaler"])
    set_rng_state(saved["rng"])
    state.epoch, state.step, state.step_in_epoch = saved["epoch"], saved["step"], saved["step_in_epoch"]
    state.best = dict(saved["best"])


def train(args) -> dict:
    """Build the run, resume, train epoch by epoch, evaluate, checkpoint, stop at the target; returns the
    last validation metrics, the best top-1, the optimizer steps done and the model."""
    import torch

    from skeleton.data import Batches, load_split, synthetic_split
    from skeleton.engine import TrainState, evaluate, train_one_epoch
    from skeleton.step import TrainStep, lr_schedule

    recipe = zoo.cli.recipe_from_args(args, FLAG_TO_RECIPE)
    run = run_config(recipe, args.recipe)
    results_dir = pathlib.Path(args.results_dir)
    resume_path = zoo.cli.resolve_resume(args.resume, results_dir / CHECKPOINT_NAME)
    if not args.synthetic and args.data_dir is None:
        raise UserError("--data-dir is needed (or --synthetic): scripts/download_data.sh prepares the data")
    # Every check that reads input (data, the checkpoint to resume) comes before anything is written.
    train_split = synthetic_split(1024, run.seed) if args.synthetic else load_split(args.data_dir, "train")
    val_split = synthetic_split(256, run.seed + 1) if args.synthetic else load_split(args.data_dir, "val")
    saved = None
    if resume_path is not None:
        saved = load_training_checkpoint(resume_path, STATE_FIELDS, "a skeleton training checkpoint")

    env, device = init_distributed(args.device)
    primary = env.rank == 0
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(run.seed)
    global_batch = run.batch_per_gpu * run.accumulation
    train_batches = Batches(*train_split, global_batch, rank=env.rank, world_size=env.world_size,
                            seed=run.seed, device=device)  # fmt: skip
    val_batches = Batches(*val_split, run.batch_per_gpu, rank=env.rank, world_size=env.world_size,
                          shuffle=False, device=device)  # fmt: skip
    steps_per_epoch = train_batches.batches_per_epoch
    epochs = run.epochs if run.steps is None else math.ceil(run.steps / steps_per_epoch)
    total_steps = run.steps if run.steps is not None else run.epochs * steps_per_epoch
    step = TrainStep(recipe, device, env.world_size)
    scheduler = lr_schedule(recipe, step.optimizer, total_steps)
    state = TrainState()
    if saved is not None:
        restore(saved, step, scheduler, state)

    results_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=primary, total_steps=total_steps, desc="train"
    )
    if primary:
        print(f"{env.world_size} process(es) on {device}, {run.precision}, {epochs} epochs x {steps_per_epoch} steps, "
              f"global batch {global_batch * env.world_size}" + (f", resumed at step {state.step}" if state.step else ""))  # fmt: skip

    def save(best: bool = False) -> None:
        if (
            primary
        ):  # the newest run.keep_checkpoints stay; best: this evaluation beat the earlier ones (best.pt)
            save_training_checkpoint(
                results_dir / CHECKPOINT_NAME, checkpoint_state(step, scheduler, state, recipe),
                keep=run.keep_checkpoints, mark_best=best,
            )  # fmt: skip

    def after_step(state: TrainState) -> None:
        every = run.checkpoint_every
        if every is not None and every.unit == "steps" and every.due(state.epoch, state.step):
            save()

    def due(interval) -> bool:  # an interval counted in epochs that ends with the epoch just finished
        return interval is not None and interval.unit == "epochs" and interval.due(state.epoch, state.step)

    metrics = {"top1": 0.0, "loss": math.nan}
    while state.epoch < epochs and state.step < total_steps:
        train_one_epoch(step, scheduler, train_batches, state, logger, steps_per_epoch=steps_per_epoch,
                        last_step=total_steps, log_every=run.log_every, after_step=after_step)  # fmt: skip
        finished = state.step >= total_steps
        evaluated, improved = finished or due(run.eval_every), False
        if evaluated:
            metrics = evaluate(step.model, val_batches, device, run.precision)
            improved = improves("top1", metrics["top1"], state.best.get("top1"))
            state.best["top1"] = max(state.best.get("top1", 0.0), metrics["top1"])
            logger.log(state.step, {**metrics, "epoch": state.epoch}, phase="eval")
        stop = finished or (evaluated and run.target.reached(metrics["top1"]))
        if stop or improved or due(run.checkpoint_every):
            save(best=improved)
        if stop:
            break
    logger.close()
    check_replicas_agree(step.model, env)  # DDP keeps the weights equal; a difference is a bug, not noise
    close_distributed()
    return {**metrics, "best_top1": state.best.get("top1", 0.0), "step": state.step, "model": step.model}


@entry_point
def main(argv=None) -> None:
    result = train(parse_args(argv))
    print(
        f"final val top1 {result['top1']:.2f}% (best {result['best_top1']:.2f}%) after {result['step']} steps"
    )


if __name__ == "__main__":
    main()
