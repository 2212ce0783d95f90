"""Train Mask R-CNN (ResNet-50-FPN) on COCO (or any COCO-format instance set): mixed precision, torchrun
DDP, gradient accumulation, exact resume, box/mask mAP targets, MLPerf log.

    torchrun --nproc_per_node 8 -m maskrcnn.train --recipe configs/maskrcnn_coco_8gpu.yaml --data-dir /data/coco
    python -m maskrcnn.train --recipe configs/shapes_cpu.yaml --data-dir /tmp/shapes

The recipe's run: section gives precision, batch per GPU and accumulation, epochs, when to evaluate and
save, the seed and the box mAP target. RESULTS_DIR/checkpoint.pt is written (write-then-rename) every
run.checkpoint_every epochs, at a run's last epoch and, on SIGTERM, after the step in progress (then the
run ends with exit 143); ``--resume auto`` continues it exactly (model, optimizer, scaler, schedule,
epoch, step in the epoch, RNG states). Training stops once box mAP reaches ``--target-map``
(run.target) and mask mAP reaches ``eval.target_mask_map`` (MLPerf: 0.377 and 0.339).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import zoo.cli
import zoo.coco
from zoo.cli import Preemption, entry_point
from zoo.errors import UserError
from zoo.io import atomic_write
from zoo.rng import rng_state
from zoo.torch import (
    CHECKPOINT_NAME,
    TRAINING_STATE_FIELDS,
    close_distributed,
    gather_objects,
    init_distributed,
    load_training_checkpoint,
    save_training_checkpoint,
    seed_everything,
)

from maskrcnn import DEFAULT_RECIPE, MODEL_DIR

# The backbone weights --backbone NAME starts from are listed in this model's own registry.
DEFAULT_REGISTRY = MODEL_DIR / "checkpoints.yaml"
# What a checkpoint.pt of this training holds beyond zoo's fields; --resume refuses a file without them.
RESUME_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler", "num_classes")
# Flags that set a model key of the recipe when given (zoo.cli maps the run: flags).
FLAG_TO_RECIPE = {"workers": "data.workers", "backbone": "model_init.backbone"}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, then the detectors' of zoo.coco); old spellings end
    in one line."""
    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    zoo.cli.add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_help="COCO root: <split>/ images and annotations/instances_<split>.json ($DATA_DIR)",
    )
    zoo.cli.add_target_arg(p, "map", unit="COCO box AP@[.5:.95] as a fraction", example=0.377)
    zoo.coco.add_training_args(p, registry=DEFAULT_REGISTRY)
    return zoo.coco.parse_training_args(p, argv)


def read_backbone(name_or_path: str, registry, recipe: dict) -> dict:
    """ResNet-50 trunk weights (a registry name or a file), checked to fit the recipe's model before a
    run writes anything; a UserError naming the file where they cannot be read or do not fit."""
    from maskrcnn.model import load_backbone_state, model_from_recipe

    return zoo.coco.load_backbone(
        name_or_path, registry, lambda weights: load_backbone_state(model_from_recipe(recipe, 2), weights)
    )


def log_mlperf_hyperparameters(mlperf, recipe: dict, world: int) -> None:
    """The maskrcnn keys of the MLPerf rules (training 3.1.0) with this recipe's values."""
    s, d, m = recipe["schedule"], recipe["data"], recipe["model"]
    images = zoo.coco.global_batch(recipe, world)
    scale = recipe["optimizer"]["base_batch"] / images
    mlperf.global_batch_size(images)
    mlperf.gradient_accumulation_steps(recipe["run"]["accumulation"])
    mlperf.hyperparameters(
        opt_base_learning_rate=zoo.coco.learning_rate(recipe, world),
        opt_learning_rate_warmup_steps=round(s["warmup_steps"] * scale),
        opt_learning_rate_warmup_factor=s["warmup_factor"],
        opt_learning_rate_decay_factor=s["gamma"],
        opt_learning_rate_decay_steps=[round(x * scale) for x in s["decay_steps"]],
        num_image_candidates=m["rpn_post_nms_top_n_train"],
        min_image_size=min(d["min_size"]) if isinstance(d["min_size"], list) else d["min_size"],
        max_image_size=d["max_size"],
    )


def train(a: argparse.Namespace) -> dict:
    """Train as ``a`` says; returns {"epochs", "losses", "maps" (epoch -> zoo.coco.coco_scores), "model"}.

    RESULTS_DIR gets checkpoint.pt, model.pt, metrics.jsonl (+ tensorboard/) and the MLPerf log
    (zoo.mlperf.log_path, benchmark "maskrcnn"; ``python -m zoo.mlperf`` checks it).
    """
    recipe, run = zoo.coco.training_recipe(a, FLAG_TO_RECIPE)
    results_dir = Path(a.results_dir)
    resume_from = zoo.cli.resolve_resume(a.resume, results_dir / CHECKPOINT_NAME)
    root = zoo.coco.data_root(a.data_dir)  # before any file is written: a mistyped path leaves nothing
    for split in (a.train_split, a.val_split):
        zoo.coco.split_paths(root, split, check=True)
    what = "a Mask R-CNN training checkpoint (maskrcnn.train's checkpoint.pt)"
    state = load_training_checkpoint(resume_from, RESUME_FIELDS, what) if resume_from else None
    backbone = recipe["model_init"]["backbone"]
    backbone_state = read_backbone(backbone, a.registry, recipe) if backbone and state is None else None
    env, device = init_distributed(a.device)
    if state is not None and env.is_primary:
        print(f"resuming from {resume_from} at step {state['step']}", file=sys.stderr)
    # The data is read and checked before the first file is written: a bad annotation leaves nothing.
    loaders = build_loaders(a, recipe, run, root, env, state)
    mlperf = zoo.coco.open_mlperf_log(
        results_dir, "maskrcnn", resumed=state is not None, env=env, seed=run.seed
    )
    with mlperf:
        return train_run(a, recipe, run, loaders, env, device, state, mlperf, backbone_state)


def build_loaders(a, recipe: dict, run, root: Path, env, state) -> tuple:
    """(train loader, val loader, optimizer steps per epoch) of ``a``'s splits, checked against each
    other and against ``state`` (a checkpoint to continue, or None)."""
    from maskrcnn.data import build_loader

    seed_everything(run.seed)
    shards = {"workers": recipe["data"]["workers"], "world_size": env.world_size, "rank": env.rank}
    train_paths = zoo.coco.split_paths(root, a.train_split)
    train_loader = build_loader(
        *train_paths, train=True, batch_size=run.batch_per_gpu, seed=run.seed, **shards
    )
    val_paths = zoo.coco.split_paths(root, a.val_split)
    val_loader = build_loader(*val_paths, train=False, batch_size=recipe["eval"]["batch_size"], **shards)
    dataset = train_loader.dataset
    if val_loader.dataset.num_classes > dataset.num_classes:
        raise UserError(f"{a.val_split} has category ids beyond those of {a.train_split}")
    full_steps = len(train_loader) // run.accumulation
    steps_per_epoch = min(a.steps_per_epoch or full_steps, full_steps)
    if steps_per_epoch == 0:
        raise UserError(
            f"no full optimizer step of {run.batch_per_gpu} x {run.accumulation} images per process"
        )
    if state is not None and state["num_classes"] != dataset.num_classes:
        classes = state["num_classes"] - 1, dataset.num_classes - 1
        raise UserError(f"the checkpoint has {classes[0]} classes, {a.train_split} has {classes[1]}")
    return train_loader, val_loader, steps_per_epoch


def train_run(a, recipe: dict, run, loaders, env, device, state, mlperf, backbone_state=None) -> dict:
    """The run itself, inside ``mlperf``'s init_start ... run_stop, over ``loaders`` (:func:`build_loaders`);
    ``state`` a checkpoint to continue, ``backbone_state`` trunk weights to start from (:func:`read_backbone`)."""
    import torch
    from zoo.log import MetricsLogger

    from maskrcnn.engine import evaluate, train_one_epoch
    from maskrcnn.model import load_backbone_state, model_from_recipe, prepare_for_speed
    from maskrcnn.step import TrainStep

    train_loader, val_loader, steps_per_epoch = loaders
    dataset = train_loader.dataset
    model = model_from_recipe(recipe, dataset.num_classes)
    if backbone_state is not None:
        load_backbone_state(model, backbone_state)
    model = prepare_for_speed(model.to(device), recipe, device)
    step = TrainStep(recipe, model, device, world_size=env.world_size)
    start_epoch = start_in_epoch = 0
    if state is not None:
        parts = {
            "model": model,
            "optimizer": step.optimizer,
            "scheduler": step.scheduler,
            "scaler": step.scaler,
        }
        zoo.coco.restore_training_state(state, env.rank, **parts)
        start_epoch, start_in_epoch = state["epoch"], state.get("step_in_epoch", 0)

    results_dir = Path(a.results_dir)
    stop = min(run.epochs, a.stop_epoch or run.epochs)
    images_per_step = zoo.coco.global_batch(recipe, env.world_size)
    samples_per_epoch = steps_per_epoch * images_per_step
    log_mlperf_hyperparameters(mlperf, recipe, env.world_size)
    mlperf.train_samples(samples_per_epoch)
    mlperf.eval_samples(len(val_loader.dataset))
    log = MetricsLogger(
        str(results_dir / "metrics.jsonl") if env.is_primary else None,
        enabled=env.is_primary,
        total_steps=steps_per_epoch * stop,
        desc="train",
    )
    evaluation = zoo.coco.Evaluation(
        run,
        recipe["eval"]["epochs"],
        val_loader.dataset.annotation_file,
        iou_types=("bbox", "segm"),
        targets={run.target.metric: run.target.value, "mask_map": recipe["eval"]["target_mask_map"]},
        logger=log,
        mlperf=mlperf,
        env=env,
        device=device,
        asynchronous=a.async_eval,
        checkpoint=results_dir / CHECKPOINT_NAME,
    )

    def save(epochs_done: int, step_in_epoch: int = 0) -> None:
        """checkpoint.pt after ``epochs_done`` whole epochs and ``step_in_epoch`` steps of the next."""
        training_state = {
            "model": model.state_dict(),
            "optimizer": step.optimizer.state_dict(),
            "scheduler": step.scheduler.state_dict(),
            "scaler": step.scaler.state_dict(),
            "epoch": epochs_done,
            "step_in_epoch": step_in_epoch,
            "step": epochs_done * steps_per_epoch + step_in_epoch,
            "recipe": recipe,
            "num_classes": dataset.num_classes,
            "category_names": dataset.category_names,
        }
        rngs = gather_objects(rng_state(), env.world_size)  # a collective: every rank takes part
        if env.is_primary:
            save_training_checkpoint(
                results_dir / CHECKPOINT_NAME, {**training_state, "rng": rngs}, keep=run.keep_checkpoints
            )
            if not step_in_epoch:
                evaluation.saved(epochs_done)  # a score of this epoch that beats the others: best.pt

    preemption = Preemption(env.world_size, device)  # SIGTERM: checkpoint after the step, then exit 143

    def after_step(done: int, in_epoch: int) -> None:
        if preemption.requested(done):
            # after the epoch's last step too: the resumed run ends the epoch (checkpoint, evaluation)
            save(epoch - 1, in_epoch)
            preemption.stop()

    losses, epoch = [], start_epoch
    mlperf.init_stop()
    mlperf.run_start()
    with preemption:
        for epoch in range(start_epoch + 1, stop + 1):
            start = start_in_epoch if epoch == start_epoch + 1 else 0  # a run resumed inside the epoch
            # the sampler leaves out the micro-batches of the steps done
            train_loader.batch_sampler.set_epoch(epoch - 1, start * run.accumulation)
            mlperf.epoch_start(epoch, samples=(epoch - 1) * samples_per_epoch)
            first_step = (epoch - 1) * steps_per_epoch
            losses += train_one_epoch(
                step, train_loader, log, epoch=epoch, steps=steps_per_epoch, first_step=first_step,
                log_every=run.log_every, images_per_step=images_per_step, start=start, after_step=after_step,
            )  # fmt: skip
            mlperf.epoch_stop(epoch, samples=epoch * samples_per_epoch)
            if (run.checkpoint_every is not None and run.checkpoint_every.due(epoch, 0)) or epoch == stop:
                save(epoch)
            if evaluation.due(epoch):
                evaluate(
                    model,
                    val_loader,
                    evaluation,
                    epoch=epoch,
                    step=epoch * steps_per_epoch,
                    amp=run.precision,
                    device=device,
                )
            if evaluation.reached(epoch):
                break
    evaluation.finish()
    if env.is_primary:
        with atomic_write(results_dir / "model.pt") as tmp:
            weights = {"model": model.state_dict(), "recipe": recipe, "num_classes": dataset.num_classes}
            torch.save({**weights, "category_names": dataset.category_names}, tmp)
    log.close()
    close_distributed()
    return {"epochs": epoch, "losses": losses, "maps": evaluation.scores, "model": model}


@entry_point
def main(argv=None) -> None:
    a = parse_args(argv)
    summary = train(a)
    for epoch, scores in sorted(summary["maps"].items()):
        print(f"epoch {epoch}: box AP {scores['map']:.4f}, mask AP {scores['mask_map']:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
