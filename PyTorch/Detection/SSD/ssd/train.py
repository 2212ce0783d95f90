"""Train SSD300 v1.1 on COCO (or any COCO-format set): mixed precision, torchrun DDP, exact resume.

    torchrun --nproc_per_node 8 -m ssd.train --recipe configs/ssd300_coco_65ep.yaml --data-dir /data/coco
    python -m ssd.train --recipe configs/shapes_smoke.yaml --synthetic --steps 5

Targets are encoded against the default boxes on the device, once per batch. A checkpoint is
written at the end of every epoch (write-then-rename); ``--resume auto`` continues it exactly (model,
optimizer, scaler, schedule, epoch, RNG states).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import torch
import zoo.cli
from zoo.cli import entry_point
from zoo.coco import AsyncScorer, merge_rank_detections
from zoo.errors import one_line
from zoo.rng import rng_state, set_rng_state
from zoo.torch import (
    autocast,
    broadcast_flag,
    close_distributed,
    gather_objects,
    init_distributed,
    load_training_checkpoint,
    seed_everything,
)

from ssd.data import DaliLoader, SyntheticLoader, build_loader
from ssd.evaluate import coco_map, detect_dataset
from ssd.model import SSD300, build_inference_model, estimate_batchnorm_statistics, load_backbone_state
from ssd.step import TrainStep, learning_rate

MODEL_DIR = Path(__file__).resolve().parents[1]
# What a checkpoint.pt of this training holds; --resume refuses a file without them.
RESUME_KEYS = ("model", "optimizer", "scheduler", "scaler", "epoch", "rng")
# The backbone weights --backbone NAME starts from are listed in this model's own registry.
DEFAULT_REGISTRY = MODEL_DIR / "checkpoints.yaml"


DEFAULT_RECIPE = MODEL_DIR / "configs" / "ssd300_coco_65ep.yaml"
# Flags that set a recipe key when given (``--amp`` sets ``amp`` through zoo.cli).
FLAG_TO_RECIPE = {
    "epochs": "epochs",
    "batch_size": "batch_size",
    "workers": "data.workers",
    "data_backend": "data.backend",
    "target_map": "eval.target_map",
    "channels_last": "channels_last",
    "compile": "compile",
}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, then SSD's); old spellings end in a one-line error."""
    p = argparse.ArgumentParser(
        prog="python -m ssd.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    zoo.cli.add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_help="COCO root: <split>/ images and annotations/instances_<split>.json ($DATA_DIR)",
    )
    zoo.cli.add_target_arg(p, "map", unit="COCO AP@[.5:.95] as a fraction", example=0.23)
    p.add_argument("--train-split", default="train2017")
    p.add_argument("--val-split", default="val2017")
    p.add_argument("--synthetic", action="store_true", help="random images and boxes (no data needed)")
    p.add_argument("--data-backend", choices=("pytorch", "dali-gpu", "dali-cpu"), help="default: recipe's")
    p.add_argument("--epochs", type=int, help="total epochs (recipe: epochs)")
    p.add_argument("--stop-epoch", type=int, help="stop after this epoch (the schedule still spans --epochs)")
    p.add_argument("--steps", type=int, help="at most this many steps per epoch (smoke runs)")
    p.add_argument("--batch-size", type=int, help="per-process batch (recipe: batch_size)")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK where CUDA is)")
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
    p.add_argument("--backbone", help="ResNet-50 weights for the trunk: a registry name or a file path")
    p.add_argument(
        "--registry", default=str(DEFAULT_REGISTRY), help="checkpoint registry YAML for --backbone"
    )
    p.add_argument(
        "--eval-epochs", help="comma-separated epochs to score on --val-split (recipe: eval.epochs)"
    )
    p.add_argument(
        "--async-eval", action="store_true", help="score in a background process while training goes on"
    )
    p.add_argument("--workers", type=int, help="data loader workers per process (recipe: data.workers)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    argv = list(sys.argv[1:] if argv is None else argv)
    reject_resume_switch(argv)
    a = zoo.cli.parse_args(p, argv)
    if a.steps is not None and a.steps < 1:
        raise SystemExit(f"error: --steps must be a positive integer, not {a.steps}")
    return a


def reject_resume_switch(argv: list[str]) -> None:
    """``--resume`` was a switch here; alone it now ends in one line naming the new spelling."""
    for i, item in enumerate(argv):
        if item == "--resume" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            raise SystemExit("error: --resume takes a value now: use --resume auto (or PATH, or none)")


def load_config(a: argparse.Namespace) -> dict:
    """The recipe with --set items and the flags of FLAG_TO_RECIPE (and --amp, --eval-epochs) applied."""
    from zoo.recipe import load_recipe

    # Read first without the strict key check, which would call the old key only "unknown".
    if "precision" in load_recipe(a.recipe):
        raise SystemExit(f"error: {a.recipe}: recipe key precision was renamed: use amp")
    r = zoo.cli.recipe_from_args(a, FLAG_TO_RECIPE)
    if a.eval_epochs is not None:
        r["eval"]["epochs"] = [int(e) for e in a.eval_epochs.split(",") if e]
    return r


def data_root(a: argparse.Namespace) -> Path:
    """``--data-dir`` as a Path; a one-line SystemExit where it is missing or not a folder."""
    if not a.data_dir:
        raise SystemExit("error: give --data-dir (a COCO-format folder; or set DATA_DIR) or --synthetic")
    root = Path(a.data_dir)
    if not root.is_dir():
        raise SystemExit(f"data dir {root} does not exist")
    return root


def build_loaders(a, r, rank, world, device):
    """Train loader, validation loader (or None), category ids, their names and the class count."""
    batch = r["batch_size"]
    d = r["data"]
    if a.synthetic:
        steps = a.steps or d.get("synthetic_steps", 100)
        return (
            SyntheticLoader(batch, steps, device=device, seed=a.seed + rank),
            None,
            list(range(1, 81)),
            {},
            81,
        )
    root = data_root(a)
    paths = {
        s: (root / s, root / "annotations" / f"instances_{s}.json") for s in (a.train_split, a.val_split)
    }
    backend = d.get("backend", "pytorch")
    if backend.startswith("dali"):
        train = DaliLoader(
            *paths[a.train_split],
            batch_size=batch,
            image_size=d["image_size"],
            train=True,
            device=backend.split("-")[1],
            world_size=world,
            rank=rank,
            workers=d["workers"],
            seed=a.seed,
        )
        cats, names, ncls = train.category_ids, train.category_names, train.num_classes
    else:
        train = build_loader(
            *paths[a.train_split],
            train=True,
            batch_size=batch,
            image_size=d["image_size"],
            augment=d.get("augment", True),
            workers=d["workers"],
            world_size=world,
            rank=rank,
            seed=a.seed,
        )
        ds = train.dataset
        cats, names, ncls = ds.category_ids, ds.category_names, ds.num_classes
    val = None
    if r["eval"].get("epochs"):
        val = build_loader(
            *paths[a.val_split],
            train=False,
            batch_size=r["eval"].get("batch_size", batch),
            image_size=d["image_size"],
            workers=d["workers"],
            world_size=world,
            rank=rank,
        )
        if val.dataset.category_ids != cats:
            raise SystemExit(f"{a.val_split} and {a.train_split} list different categories")
    return train, val, cats, names, ncls


def load_backbone(model: SSD300, name_or_path: str, registry: str) -> None:
    from zoo.checkpoints import CheckpointError, fetch, load_registry

    path = Path(name_or_path)
    if not path.is_file():
        try:
            path = fetch(load_registry(registry).get(name_or_path))
        except CheckpointError as e:
            raise SystemExit(str(e)) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: files from the web
        n = load_backbone_state(model, state)
    except Exception as e:  # noqa: BLE001 - unpickling and layout problems read the same to a user
        reason = one_line(e)
        raise SystemExit(f"backbone weights {path}: {reason[:200]}") from None
    print(f"backbone: {n} ResNet-50 tensors from {path}", file=sys.stderr)


def precise_batchnorm(model: torch.nn.Module, loader, batches: int, device, amp: str) -> None:
    """Re-estimate BatchNorm running statistics as a plain average over ``batches`` training batches."""

    def forward(batch) -> None:
        with autocast(device, amp):
            model(batch.to(device).images)

    estimate_batchnorm_statistics(model, itertools.islice(loader, batches), forward)


def save_checkpoint(path: Path, **state) -> None:
    from zoo.io import atomic_write

    with atomic_write(path) as tmp:
        torch.save(state, tmp)


def mlperf_log_path(results_dir: Path, start_epoch: int) -> Path:
    """The MLPerf log of a run: ``mlperf.log`` for a run from epoch 0 (replaced: one run per file, as
    the checker wants), ``mlperf_from_epoch<N>.log`` for a run resumed after epoch N."""
    return results_dir / ("mlperf.log" if start_epoch == 0 else f"mlperf_from_epoch{start_epoch}.log")


def log_mlperf_hyperparameters(mlperf, r: dict, lr: float, world: int) -> None:
    """The SSD keys of the MLPerf rules (training 1.0.0) with this recipe's values."""
    o, s = r["optimizer"], r["schedule"]
    values = {
        "opt_name": "sgd",
        "opt_base_learning_rate": lr,
        "opt_momentum": o["momentum"],
        "opt_weight_decay": o["weight_decay"],
        # Linear warm-up from 0, as the reference's with warmup factor 0 (ours starts one step in).
        "opt_learning_rate_warmup_factor": 0,
        "opt_learning_rate_decay_boundary_epochs": list(s.get("milestones", [])),
        "opt_learning_rate_decay_factor": s.get("gamma", 0.1),
        "model_bn_span": r["batch_size"],  # BatchNorm statistics are per process
    }
    if s.get("warmup_steps", 0):
        values["opt_learning_rate_warmup_steps"] = s["warmup_steps"]
    if r["data"].get("augment", True):
        # Tries of the IoU-constrained crop: torchvision's RandomIoUCrop 40, DALI's random_bbox_crop 50.
        values["max_samples"] = 50 if r["data"].get("backend", "pytorch").startswith("dali") else 40
    mlperf.global_batch_size(r["batch_size"] * world)
    mlperf.gradient_accumulation_steps(1)
    mlperf.hyperparameters(**values)


def train(a: argparse.Namespace) -> dict:
    """Train as ``a`` says; returns {"epochs", "losses", "maps" (epoch -> mAP), "model"}.

    RESULTS_DIR gets checkpoint.pt, model.pt, metrics.jsonl (+ tensorboard/) and the MLPerf log
    (:func:`mlperf_log_path`, benchmark "ssd"; ``python -m zoo.mlperf`` checks it).
    """
    from zoo.mlperf import MLPerfLogger

    r = load_config(a)
    results_dir = Path(a.results_dir)
    resume_from = zoo.cli.resolve_resume(a.resume, results_dir / "checkpoint.pt")
    if not a.synthetic:
        data_root(a)  # before the MLPerf log is opened: a mistyped path leaves no results folder behind
    env, device = init_distributed(a.device)
    state = (
        load_training_checkpoint(
            resume_from, RESUME_KEYS, "an SSD training checkpoint (ssd.train's checkpoint.pt)"
        )
        if resume_from
        else None
    )
    if state is not None and env.is_primary:
        print(f"resuming from {resume_from} at epoch {state['epoch']}", file=sys.stderr)
    mlperf_path = mlperf_log_path(results_dir, state["epoch"] if state else 0)
    if env.is_primary:
        mlperf_path.unlink(missing_ok=True)
    with MLPerfLogger(mlperf_path, "ssd", enabled=env.is_primary) as mlperf:
        mlperf.cache_clear(False)  # the page cache is not dropped before a run
        mlperf.init_start()
        mlperf.seed(a.seed)
        return train_run(a, r, env, device, state, mlperf)


def train_run(a: argparse.Namespace, r: dict, env, device, state: dict | None, mlperf) -> dict:
    """The run itself, inside ``mlperf``'s init_start ... run_stop; ``state`` a checkpoint to continue."""
    from zoo.log import MetricsLogger

    rank, world, primary = env.rank, env.world_size, env.is_primary
    seed_everything(a.seed)
    train_loader, val_loader, category_ids, category_names, num_classes = build_loaders(
        a, r, rank, world, device
    )
    steps_per_epoch = len(train_loader) if a.steps is None else min(a.steps, len(train_loader))
    if steps_per_epoch == 0:
        raise SystemExit(f"error: no full batch of {r['batch_size']} per process in the training set")

    model = SSD300(num_classes=num_classes)
    if a.backbone:
        load_backbone(model, a.backbone, a.registry)
    step_fn = TrainStep(r, device, steps_per_epoch=steps_per_epoch, world_size=world, model=model)
    model, optimizer, scheduler, scaler = step_fn.model, step_fn.optimizer, step_fn.scheduler, step_fn.scaler
    lr = learning_rate(r, world)
    amp = r.get("amp", "bf16")

    results_dir = Path(a.results_dir)
    ckpt_path = results_dir / "checkpoint.pt"
    start_epoch = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"][rank] if rank < len(state["rng"]) else state["rng"][0])
        start_epoch = state["epoch"]

    if primary:
        results_dir.mkdir(parents=True, exist_ok=True)
    epochs = r["epochs"]
    stop = min(epochs, a.stop_epoch) if a.stop_epoch else epochs
    samples_per_epoch = steps_per_epoch * r["batch_size"] * world
    log_mlperf_hyperparameters(mlperf, r, lr, world)
    mlperf.train_samples(samples_per_epoch)
    mlperf.eval_samples(len(val_loader.dataset) if val_loader is not None else 0)
    log = MetricsLogger(
        str(results_dir / "metrics.jsonl") if primary else None,
        enabled=primary,
        total_steps=steps_per_epoch * stop,
        desc="train",
    )
    scorer = AsyncScorer(coco_map) if a.async_eval and primary and val_loader is not None else None
    eval_epochs = set(r["eval"].get("epochs", []))
    target = r["eval"].get("target_map")
    summary = {"epochs": start_epoch, "losses": [], "maps": {}, "model": model}
    step = start_epoch * steps_per_epoch

    def record_map(epoch: int, stats: dict) -> bool:
        summary["maps"][epoch] = stats["mAP"]
        log.log(step, stats, phase="eval")
        mlperf.eval_accuracy(stats["mAP"], epoch)
        return target is not None and stats["mAP"] >= target

    mlperf.init_stop()
    mlperf.run_start()
    reached = False
    for epoch in range(start_epoch, stop):
        if getattr(train_loader, "sampler", None) is not None and hasattr(train_loader.sampler, "set_epoch"):
            train_loader.sampler.set_epoch(epoch)
        mlperf.epoch_start(epoch + 1, samples=epoch * samples_per_epoch)
        step_fn.train()
        t0 = time.time()
        for i, batch in enumerate(train_loader):
            if i >= steps_per_epoch:
                break
            batch = batch.to(device)
            loss = step_fn(batch.images, batch.boxes, batch.labels)
            step += 1
            if i % a.log_every == 0 or i == steps_per_epoch - 1:
                value = loss.item()  # one host sync per log line, not per step
                summary["losses"].append(value)
                log.progress(
                    step, batch.images.shape[0] * world, {"loss": value, "lr": scheduler.get_last_lr()[0]}
                )
                log.log(step, {"loss": value, "epoch": epoch + 1})
        seconds = time.time() - t0  # the last step's loss.item() waited for the device
        mlperf.epoch_stop(epoch + 1, samples=(epoch + 1) * samples_per_epoch)
        images_per_s = steps_per_epoch * r["batch_size"] * world / seconds
        if primary:
            log.log(step, {"epoch": epoch + 1, "images_per_s": images_per_s}, units={"images_per_s": "img/s"})
            # From the second epoch on no compiling or autotuning is left: a steady-state figure.
            print(f"epoch {epoch + 1}: {images_per_s:.1f} img/s ({seconds:.2f} s)", file=sys.stderr)
        summary["epochs"] = epoch + 1
        if (epoch + 1) % r.get("checkpoint_every", 1) == 0 or epoch + 1 == stop:
            rngs = gather_objects(rng_state(), world)  # a collective: every rank takes part
            if primary:
                save_checkpoint(
                    ckpt_path,
                    model=model.state_dict(),
                    optimizer=optimizer.state_dict(),
                    scheduler=scheduler.state_dict(),
                    scaler=scaler.state_dict(),
                    epoch=epoch + 1,
                    rng=rngs,
                    recipe=r,
                    category_ids=category_ids,
                )
        if val_loader is not None and (epoch + 1) in eval_epochs:
            mlperf.eval_start(epoch + 1)
            if r["eval"].get("precise_bn_batches"):
                precise_batchnorm(model, train_loader, r["eval"]["precise_bn_batches"], device, amp)
            with MetricsLogger(
                enabled=primary, total_steps=len(val_loader), desc=f"eval epoch {epoch + 1}"
            ) as eval_progress:
                results = detect_dataset(
                    build_inference_model(model, amp, channels_last=step_fn.channels_last),
                    val_loader,
                    category_ids,
                    device=device,
                    progress=eval_progress,
                )
            results = merge_rank_detections(gather_objects(results, world))
            ann = val_loader.dataset.annotation_file
            if primary and scorer is not None:
                scorer.submit(epoch + 1, ann, results)
                mlperf.eval_stop(epoch + 1)  # detections done; the score is logged when it arrives
            elif primary:
                stats = coco_map(ann, results)
                mlperf.eval_stop(epoch + 1)
                reached = record_map(epoch + 1, stats)
        if scorer is not None:
            for e, stats in scorer.done():
                reached = record_map(e, stats) or reached
        reached = broadcast_flag(reached, world, device)
        if reached:
            if primary:
                print(f"target mAP {target} reached after epoch {epoch + 1}", file=sys.stderr)
            break
    if scorer is not None:
        for e, stats in scorer.done(wait=True):
            reached = record_map(e, stats) or reached
        scorer.close()
    mlperf.run_stop("success" if reached else "aborted")
    if primary:
        save_checkpoint(
            results_dir / "model.pt",
            model=model.state_dict(),
            category_ids=category_ids,
            category_names=category_names,
            num_classes=num_classes,
        )
    log.close()
    close_distributed()
    return summary


@entry_point
def main(argv=None) -> None:
    a = parse_args(argv)
    summary = train(a)
    if summary["maps"]:
        print(
            "mAP by epoch: " + ", ".join(f"{e}: {m:.4f}" for e, m in sorted(summary["maps"].items())),
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
