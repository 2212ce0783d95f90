"""Train SSD300 v1.1 on COCO (or any COCO-format set): mixed precision, torchrun DDP, exact resume.

    torchrun --nproc_per_node 8 -m ssd.train --recipe configs/ssd300_coco_8gpu_65ep.yaml --data-dir /data/coco
    python -m ssd.train --recipe configs/shapes_smoke.yaml --synthetic --steps-per-epoch 5

The recipe's run: section gives precision, batch per GPU, epochs, when to evaluate and save, the seed
and the mAP target. Targets are encoded against the default boxes on the device, once per batch
(ssd.step). RESULTS_DIR/checkpoint.pt is written (write-then-rename) every run.checkpoint_every epochs,
at a run's last epoch and, on SIGTERM, after the step in progress (then the run ends with exit 143);
``--resume auto`` continues it exactly (model, optimizer, scaler, schedule, epoch, step in the epoch,
RNG states).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

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

from ssd import DEFAULT_RECIPE, MODEL_DIR

if TYPE_CHECKING:
    from ssd.model import SSD300

# The backbone weights --backbone NAME starts from are listed in this model's own registry.
DEFAULT_REGISTRY = MODEL_DIR / "checkpoints.yaml"
# What a checkpoint.pt of this training holds beyond zoo's fields; --resume refuses a file without them.
RESUME_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler", "category_ids")
# Flags that set a model key of the recipe when given (zoo.cli maps the run: flags).
FLAG_TO_RECIPE = {
    "workers": "data.workers",
    "data_backend": "data.backend",
    "channels_last": "channels_last",
    "compile": "compile",
}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, the detectors' (zoo.coco), then SSD's); old spellings
    end in a one-line error."""
    p = argparse.ArgumentParser(
        prog="python -m ssd.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    zoo.cli.add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_help="COCO root: <split>/ images and annotations/instances_<split>.json ($DATA_DIR)",
    )
    zoo.cli.add_target_arg(p, "map", unit="COCO AP@[.5:.95] as a fraction", example=0.23)
    zoo.coco.add_training_args(p, registry=DEFAULT_REGISTRY)
    p.add_argument("--synthetic", action="store_true", help="random images and boxes (no data needed)")
    p.add_argument("--data-backend", choices=("pytorch", "dali-gpu", "dali-cpu"), help="default: recipe's")
    p.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        help="NHWC memory format (recipe: channels_last)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile forward and loss (recipe: compile, compile_mode)",
    )
    return zoo.coco.parse_training_args(p, argv)


def build_loaders(a, recipe: dict, run, env, device):
    """Train loader, validation loader (or None), category ids, their names and the class count."""
    from ssd.data import DaliLoader, SyntheticLoader, build_loader

    rank, world = env.rank, env.world_size
    batch = run.batch_per_gpu * run.accumulation  # the step splits it into micro-batches
    d = recipe["data"]
    if a.synthetic:
        steps = a.steps_per_epoch or d["synthetic_steps"]
        loader = SyntheticLoader(batch, steps, device=device, seed=run.seed + rank)
        return loader, None, list(range(1, 81)), {}, 81
    root = zoo.coco.data_root(a.data_dir, synthetic=True)
    train_paths = zoo.coco.split_paths(root, a.train_split)
    common = {"image_size": d["image_size"], "workers": d["workers"], "world_size": world, "rank": rank}
    if d["backend"].startswith("dali"):
        device_kind = d["backend"].split("-")[1]
        train = DaliLoader(
            *train_paths, batch_size=batch, train=True, device=device_kind, seed=run.seed, **common
        )
        cats, names, ncls = train.category_ids, train.category_names, train.num_classes
    else:
        train = build_loader(
            *train_paths, train=True, batch_size=batch, augment=d["augment"], seed=run.seed, **common
        )
        cats, names, ncls = (
            train.dataset.category_ids,
            train.dataset.category_names,
            train.dataset.num_classes,
        )
    val = None
    if recipe["eval"]["epochs"] != []:
        val_paths = zoo.coco.split_paths(root, a.val_split)
        val = build_loader(*val_paths, train=False, batch_size=recipe["eval"]["batch_size"], **common)
        if val.dataset.category_ids != cats:
            raise UserError(f"{a.val_split} and {a.train_split} list different categories")
    return train, val, cats, names, ncls


def load_backbone(model: SSD300, name_or_path: str, registry) -> None:
    """ResNet-50 weights (a registry name or a file) into ``model``'s trunk; a UserError naming the
    file where they cannot be read or do not fit."""
    from ssd.model import load_backbone_state

    zoo.coco.load_backbone(name_or_path, registry, lambda weights: load_backbone_state(model, weights))


def log_mlperf_hyperparameters(mlperf, recipe: dict, run, world: int) -> None:
    """The SSD keys of the MLPerf rules (training 1.0.0) with this recipe's values."""
    o, s, d = recipe["optimizer"], recipe["schedule"], recipe["data"]
    values = {
        "opt_name": "sgd",
        "opt_base_learning_rate": zoo.coco.learning_rate(recipe, world),
        "opt_momentum": o["momentum"],
        "opt_weight_decay": o["weight_decay"],
        # Linear warm-up from 0, as the reference's with warmup factor 0 (ours starts one step in).
        "opt_learning_rate_warmup_factor": 0,
        "opt_learning_rate_decay_boundary_epochs": list(s["milestones"]),
        "opt_learning_rate_decay_factor": s["gamma"],
        "model_bn_span": run.batch_per_gpu,  # BatchNorm statistics are per process and micro-batch
    }
    if s["warmup_steps"]:
        values["opt_learning_rate_warmup_steps"] = s["warmup_steps"]
    if d["augment"]:
        # Tries of the IoU-constrained crop: torchvision's RandomIoUCrop 40, DALI's random_bbox_crop 50.
        values["max_samples"] = 50 if d["backend"].startswith("dali") else 40
    mlperf.global_batch_size(zoo.coco.global_batch(recipe, world))
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.hyperparameters(**values)


def train(a: argparse.Namespace) -> dict:
    """Train as ``a`` says; returns {"epochs", "losses", "maps" (epoch -> zoo.coco.coco_scores), "model"}.

    RESULTS_DIR gets checkpoint.pt, model.pt, metrics.jsonl (+ tensorboard/) and the MLPerf log
    (zoo.mlperf.log_path, benchmark "ssd"; ``python -m zoo.mlperf`` checks it).
    """
    recipe, run = zoo.coco.training_recipe(a, FLAG_TO_RECIPE)
    results_dir = Path(a.results_dir)
    resume_from = zoo.cli.resolve_resume(a.resume, results_dir / CHECKPOINT_NAME)
    if not a.synthetic:
        zoo.coco.data_root(a.data_dir, synthetic=True)  # before any file is written
    what = "an SSD training checkpoint (ssd.train's checkpoint.pt)"
    state = load_training_checkpoint(resume_from, RESUME_FIELDS, what) if resume_from else None
    env, device = init_distributed(a.device)
    if state is not None and env.is_primary:
        print(f"resuming from {resume_from} at step {state['step']}", file=sys.stderr)
    mlperf = zoo.coco.open_mlperf_log(results_dir, "ssd", resumed=state is not None, env=env, seed=run.seed)
    with mlperf:
        return train_run(a, recipe, run, env, device, state, mlperf)


def train_run(a: argparse.Namespace, recipe: dict, run, env, device, state: dict | None, mlperf) -> dict:
    """The run itself, inside ``mlperf``'s init_start ... run_stop; ``state`` a checkpoint to continue."""
    import torch
    from zoo.coco.sampling import epoch_batches
    from zoo.log import MetricsLogger

    from ssd.engine import evaluate, train_one_epoch
    from ssd.model import SSD300
    from ssd.step import TrainStep

    seed_everything(run.seed)
    train_loader, val_loader, category_ids, category_names, num_classes = build_loaders(
        a, recipe, run, env, device
    )
    steps_per_epoch = min(a.steps_per_epoch or len(train_loader), len(train_loader))
    if steps_per_epoch == 0:
        raise UserError(
            f"no full batch of {run.batch_per_gpu} x {run.accumulation} per process in the training set"
        )
    model = SSD300(num_classes=num_classes)
    if a.backbone:
        load_backbone(model, a.backbone, a.registry)
    step = TrainStep(recipe, device, steps_per_epoch=steps_per_epoch, world_size=env.world_size, model=model)
    start_epoch = start_in_epoch = 0
    if state is not None:
        parts = {
            "model": step.model,
            "optimizer": step.optimizer,
            "scheduler": step.scheduler,
            "scaler": step.scaler,
        }
        zoo.coco.restore_training_state(state, env.rank, **parts)
        start_epoch, start_in_epoch = state["epoch"], state.get("step_in_epoch", 0)

    results_dir = Path(a.results_dir)
    stop = min(run.epochs, a.stop_epoch or run.epochs)
    samples_per_epoch = steps_per_epoch * zoo.coco.global_batch(recipe, env.world_size)
    log_mlperf_hyperparameters(mlperf, recipe, run, env.world_size)
    mlperf.train_samples(samples_per_epoch)
    mlperf.eval_samples(len(val_loader.dataset) if val_loader is not None else 0)
    log = MetricsLogger(
        str(results_dir / "metrics.jsonl") if env.is_primary else None,
        enabled=env.is_primary,
        total_steps=steps_per_epoch * stop,
        desc="train",
    )
    evaluation = zoo.coco.Evaluation(
        run,
        recipe["eval"]["epochs"],
        val_loader.dataset.annotation_file if val_loader is not None else None,
        targets={run.target.metric: run.target.value},
        logger=log,
        mlperf=mlperf,
        env=env,
        device=device,
        asynchronous=a.async_eval,
        checkpoint=results_dir / CHECKPOINT_NAME,
    )
    precise_bn = (
        (train_loader, recipe["eval"]["precise_bn_batches"]) if recipe["eval"]["precise_bn_batches"] else None
    )

    def save(epochs_done: int, step_in_epoch: int = 0) -> None:
        """checkpoint.pt after ``epochs_done`` whole epochs and ``step_in_epoch`` steps of the next."""
        training_state = {
            "model": step.model.state_dict(),
            "optimizer": step.optimizer.state_dict(),
            "scheduler": step.scheduler.state_dict(),
            "scaler": step.scaler.state_dict(),
            "epoch": epochs_done,
            "step_in_epoch": step_in_epoch,
            "step": epochs_done * steps_per_epoch + step_in_epoch,
            "recipe": recipe,
            "category_ids": category_ids,
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
            batches = epoch_batches(train_loader, epoch - 1, start)
            mlperf.epoch_start(epoch, samples=(epoch - 1) * samples_per_epoch)
            first_step = (epoch - 1) * steps_per_epoch
            losses += train_one_epoch(
                step, batches, log, epoch=epoch, steps=steps_per_epoch, first_step=first_step,
                log_every=run.log_every, world=env.world_size, start=start, after_step=after_step,
            )  # fmt: skip
            mlperf.epoch_stop(epoch, samples=epoch * samples_per_epoch)
            if (run.checkpoint_every is not None and run.checkpoint_every.due(epoch, 0)) or epoch == stop:
                save(epoch)
            if evaluation.due(epoch):
                evaluate(
                    step.model, val_loader, evaluation, epoch=epoch, step=epoch * steps_per_epoch,
                    category_ids=category_ids, amp=run.precision, channels_last=step.channels_last,
                    device=device, precise_bn=precise_bn,
                )  # fmt: skip
            if evaluation.reached(epoch):
                break
    evaluation.finish()
    if env.is_primary:
        with atomic_write(results_dir / "model.pt") as tmp:
            weights = {"model": step.model.state_dict(), "category_ids": category_ids}
            torch.save({**weights, "category_names": category_names, "num_classes": num_classes}, tmp)
    log.close()
    close_distributed()
    return {"epochs": epoch, "losses": losses, "maps": evaluation.scores, "model": step.model}


@entry_point
def main(argv=None) -> None:
    a = parse_args(argv)
    summary = train(a)
    if summary["maps"]:
        maps = ", ".join(f"{e}: {s['map']:.4f}" for e, s in sorted(summary["maps"].items()))
        print(f"box AP by epoch: {maps}", file=sys.stderr)


if __name__ == "__main__":
    main()
