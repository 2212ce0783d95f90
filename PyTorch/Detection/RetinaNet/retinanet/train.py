"""Train RetinaNet on OpenImages-MLPerf or COCO (any COCO-format set): mixed precision, torchrun DDP,
exact resume, the mAP target, MLPerf's ``retinanet`` log and pycocotools scoring in the background.

    torchrun --nproc_per_node 8 -m retinanet.train --data-dir /data/openimages-mlperf
    python -m retinanet.train --recipe configs/digits_cpu.yaml --data-dir /tmp/digits

The recipe's run: section gives precision, batch per GPU, epochs, when to evaluate and save, the seed and
the mAP target; model:, optimizer:, schedule:, data: and eval: the rest. RESULTS_DIR/checkpoint.pt is
written (write-then-rename) every run.checkpoint_every epochs, at a run's last epoch and, on SIGTERM, after
the step in progress (then the run ends with exit 143); ``--resume auto`` continues it exactly (model,
optimizer, scaler, schedule, epoch, step in the epoch, RNG states).
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

from retinanet import DEFAULT_RECIPE, MODEL_DIR

DEFAULT_REGISTRY = MODEL_DIR / "checkpoints.yaml"
# What a checkpoint.pt of this training holds beyond zoo's fields; --resume refuses a file without them.
RESUME_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler", "category_ids", "settings")
FLAG_TO_RECIPE = {"workers": "data.workers", "channels_last": "channels_last", "compile": "compile"}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, the detectors' of zoo.coco, then RetinaNet's)."""
    p = argparse.ArgumentParser(
        prog="python -m retinanet.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    zoo.cli.add_run_args(
        p, default_recipe=DEFAULT_RECIPE,
        data_help="COCO-format root: <split>/ images and annotations/instances_<split>.json ($DATA_DIR)",
    )  # fmt: skip
    zoo.cli.add_target_arg(p, "map", unit="mAP@[.5:.95] as a fraction", example=0.34)
    zoo.coco.add_training_args(p, registry=DEFAULT_REGISTRY)
    # The splits default to the recipe's data.train_split / data.val_split.
    p.set_defaults(train_split=None, val_split=None)
    p.add_argument("--synthetic", action="store_true", help="random images and boxes (no data needed)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, help="recipe: channels_last")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, help="recipe: compile, compile_mode")
    return zoo.coco.parse_training_args(p, argv)


def build_loaders(a, recipe: dict, run, env, device):
    """Train loader, validation loader (or None), category ids and their names."""
    from retinanet.data import SyntheticLoader, build_loader

    batch = run.batch_per_gpu * run.accumulation  # the step splits it into micro-batches
    d = recipe["data"]
    if a.synthetic:
        classes = d["synthetic_classes"]
        loader = SyntheticLoader(
            batch, a.steps_per_epoch or d["synthetic_steps"], num_classes=classes, image_size=d["image_size"],
            device=device, seed=run.seed + env.rank,
        )  # fmt: skip
        return loader, None, list(range(1, classes + 1)), {}
    root = zoo.coco.data_root(a.data_dir, synthetic=True)
    common = {
        "image_size": d["image_size"],
        "workers": d["workers"],
        "world_size": env.world_size,
        "rank": env.rank,
    }
    train_split = a.train_split or d["train_split"]
    train = build_loader(
        *zoo.coco.split_paths(root, train_split, check=True), train=True, batch_size=batch, flip=d["flip"],
        seed=run.seed, **common,
    )  # fmt: skip
    cats, names = train.dataset.category_ids, train.dataset.category_names
    val = None
    if recipe["eval"]["epochs"] != []:
        val_paths = zoo.coco.split_paths(root, a.val_split or d["val_split"], check=True)
        val = build_loader(*val_paths, train=False, batch_size=recipe["eval"]["batch_size"], **common)
        if val.dataset.category_ids != cats:
            raise UserError(f"{val_paths[1]} and the training split list different categories")
    return train, val, cats, names


def log_mlperf_hyperparameters(mlperf, recipe: dict, run, world: int) -> None:
    """The keys of MLPerf's retinanet rules (training 5.1.0) with this recipe's values."""
    s = recipe["schedule"]
    mlperf.global_batch_size(zoo.coco.global_batch(recipe, world))
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.hyperparameters(
        opt_name="adam",
        opt_base_learning_rate=zoo.coco.learning_rate(recipe, world),
        opt_weight_decay=recipe["optimizer"]["weight_decay"],
        opt_learning_rate_warmup_epochs=s["warmup_epochs"],
        opt_learning_rate_warmup_factor=s["warmup_factor"],
    )


def train(a: argparse.Namespace) -> dict:
    """Train as ``a`` says; returns {"epochs", "losses", "maps" (epoch -> zoo.coco.coco_scores), "model"}.

    RESULTS_DIR gets checkpoint.pt, model.pt, metrics.jsonl (+ tensorboard/) and the MLPerf log
    (zoo.mlperf.log_path, benchmark "retinanet"; ``python -m zoo.mlperf`` checks it).
    """
    from retinanet.settings import model_settings

    recipe, run = zoo.coco.training_recipe(a, FLAG_TO_RECIPE)
    model_settings(recipe["model"])  # a bad model key ends here, before anything is written
    results_dir = Path(a.results_dir)
    resume_from = zoo.cli.resolve_resume(a.resume, results_dir / CHECKPOINT_NAME)
    if not a.synthetic:
        zoo.coco.data_root(a.data_dir, synthetic=True)
    what = "a RetinaNet training checkpoint (retinanet.train's checkpoint.pt)"
    state = load_training_checkpoint(resume_from, RESUME_FIELDS, what) if resume_from else None
    env, device = init_distributed(a.device)
    if state is not None and env.is_primary:
        print(f"resuming from {resume_from} at step {state['step']}", file=sys.stderr)
    mlperf = zoo.coco.open_mlperf_log(
        results_dir, "retinanet", resumed=state is not None, env=env, seed=run.seed
    )
    with mlperf:
        return train_run(a, recipe, run, env, device, state, mlperf)


def train_run(a, recipe: dict, run, env, device, state: dict | None, mlperf) -> dict:
    """The run itself, inside ``mlperf``'s init_start ... run_stop; ``state`` a checkpoint to continue."""
    import torch
    from zoo.coco.sampling import epoch_batches
    from zoo.log import MetricsLogger

    from retinanet.engine import evaluate, train_one_epoch
    from retinanet.model import RetinaNet, load_backbone_state
    from retinanet.step import TrainStep

    seed_everything(run.seed)
    train_loader, val_loader, category_ids, category_names = build_loaders(a, recipe, run, env, device)
    steps_per_epoch = min(a.steps_per_epoch or len(train_loader), len(train_loader))
    if steps_per_epoch == 0:
        raise UserError(
            f"no full batch of {run.batch_per_gpu} x {run.accumulation} per process in the training set"
        )
    model = RetinaNet(len(category_ids), recipe["model"])
    if a.backbone:
        zoo.coco.load_backbone(a.backbone, a.registry, lambda weights: load_backbone_state(model, weights))
    step = TrainStep(
        recipe, device, steps_per_epoch=steps_per_epoch, num_classes=len(category_ids),
        world_size=env.world_size, model=model,
    )  # fmt: skip
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
        str(results_dir / "metrics.jsonl") if env.is_primary else None, enabled=env.is_primary,
        total_steps=steps_per_epoch * stop, desc="train",
    )  # fmt: skip
    evaluation = zoo.coco.Evaluation(
        run, recipe["eval"]["epochs"], val_loader.dataset.annotation_file if val_loader is not None else None,
        targets={run.target.metric: run.target.value}, logger=log, mlperf=mlperf, env=env, device=device,
        asynchronous=a.async_eval or bool(recipe["eval"]["asynchronous"]), checkpoint=results_dir / CHECKPOINT_NAME,
    )  # fmt: skip

    def save(epochs_done: int, step_in_epoch: int = 0) -> None:
        """checkpoint.pt after ``epochs_done`` whole epochs and ``step_in_epoch`` steps of the next."""
        training_state = {
            "model": step.model.state_dict(), "optimizer": step.optimizer.state_dict(),
            "scheduler": step.scheduler.state_dict(), "scaler": step.scaler.state_dict(), "epoch": epochs_done,
            "step_in_epoch": step_in_epoch, "step": epochs_done * steps_per_epoch + step_in_epoch,
            "recipe": recipe, "category_ids": category_ids, "settings": step.model.settings,
        }  # fmt: skip
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
            losses += train_one_epoch(
                step, batches, log, epoch=epoch, steps=steps_per_epoch, first_step=(epoch - 1) * steps_per_epoch,
                log_every=run.log_every, world=env.world_size, start=start, after_step=after_step,
            )  # fmt: skip
            mlperf.epoch_stop(epoch, samples=epoch * samples_per_epoch)
            if (run.checkpoint_every is not None and run.checkpoint_every.due(epoch, 0)) or epoch == stop:
                save(epoch)
            if evaluation.due(epoch):
                evaluate(
                    step.model, val_loader, evaluation, epoch=epoch, step=epoch * steps_per_epoch,
                    category_ids=category_ids, amp=run.precision, device=device,
                )  # fmt: skip
            if evaluation.reached(epoch):
                break
    evaluation.finish()
    if env.is_primary:
        with atomic_write(results_dir / "model.pt") as tmp:
            torch.save({
                "model": step.model.state_dict(), "category_ids": category_ids, "category_names": category_names,
                "settings": step.model.settings, "image_size": recipe["data"]["image_size"],
            }, tmp)  # fmt: skip
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
