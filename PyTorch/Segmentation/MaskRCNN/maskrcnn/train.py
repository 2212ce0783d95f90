"""Train Mask R-CNN (ResNet-50-FPN) on COCO (or any COCO-format instance set): mixed precision, torchrun
DDP, gradient accumulation, exact resume, box/mask mAP targets, MLPerf log.

    torchrun --nproc_per_node 8 -m maskrcnn.train --recipe configs/maskrcnn_coco_8gpu.yaml --data-dir /data/coco
    python -m maskrcnn.train --recipe configs/shapes_cpu.yaml --data-dir /tmp/shapes

A checkpoint is written at the end of every ``checkpoint_every`` epochs (write-then-rename);
``--resume auto`` continues it exactly (model, optimizer, scaler, schedule, epoch, RNG states).
Training stops once box mAP reaches ``--target-map`` (recipe ``eval.target_map``) and mask mAP
reaches ``eval.target_mask_map`` (MLPerf: 0.377 and 0.339).
"""

from __future__ import annotations

import argparse
import contextlib
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
    distributed_model,
    gather_objects,
    grad_scaler,
    init_distributed,
    parameter_groups,
    seed_everything,
)

from maskrcnn.data import build_loader
from maskrcnn.evaluate import coco_map, detect_dataset
from maskrcnn.model import load_backbone_state, model_from_recipe, prepare_for_speed

MODEL_DIR = Path(__file__).resolve().parents[1]
# The backbone weights --backbone NAME starts from are listed in this model's own registry.
DEFAULT_REGISTRY = MODEL_DIR / "checkpoints.yaml"
DEFAULT_RECIPE = MODEL_DIR / "configs" / "maskrcnn_coco_1gpu.yaml"
# Flags that set a recipe key when given (``--amp`` sets ``amp`` through zoo.cli).
FLAG_TO_RECIPE = {
    "epochs": "epochs",
    "batch_size": "batch_size",
    "accumulate": "accumulate",
    "workers": "data.workers",
    "target_map": "eval.target_map",
    "backbone": "model_init.backbone",
}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags (zoo.cli's shared ones, then Mask R-CNN's); old spellings end in one line."""
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
    p.add_argument("--train-split", default="train2017")
    p.add_argument("--val-split", default="val2017")
    p.add_argument("--epochs", type=int, help="total epochs (recipe: epochs)")
    p.add_argument("--stop-epoch", type=int, help="stop after this epoch (the schedule still spans --epochs)")
    p.add_argument("--steps", type=int, help="at most this many optimizer steps per epoch (smoke runs)")
    p.add_argument("--batch-size", type=int, help="images per process and micro-step (recipe: batch_size)")
    p.add_argument("--accumulate", type=int, help="micro-steps per optimizer step (recipe: accumulate)")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK where CUDA is)")
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
    return zoo.cli.parse_args(p, argv)


def load_config(a: argparse.Namespace) -> dict:
    """The recipe with --set items and the flags of FLAG_TO_RECIPE (and --amp, --eval-epochs) applied."""
    r = zoo.cli.recipe_from_args(a, FLAG_TO_RECIPE)
    if a.eval_epochs is not None:
        r["eval"]["epochs"] = [int(e) for e in a.eval_epochs.split(",") if e]
    if r.get("accumulate", 1) < 1:
        raise SystemExit(f"error: accumulate must be >= 1, got {r['accumulate']}")
    for flag, value in (("--steps", a.steps), ("--stop-epoch", a.stop_epoch)):
        if value is not None and value < 1:
            raise SystemExit(f"error: {flag} must be a positive integer, not {value}")
    return r


def data_root(a: argparse.Namespace) -> Path:
    """``--data-dir`` as a Path; a one-line SystemExit where it is missing or not a folder."""
    if not a.data_dir:
        raise SystemExit("error: give --data-dir (a COCO-format folder; or set DATA_DIR)")
    root = Path(a.data_dir)
    if not root.is_dir():
        raise SystemExit(f"error: data dir {root} does not exist")
    return root


def split_paths(root: Path, split: str) -> tuple[Path, Path]:
    return root / split, root / "annotations" / f"instances_{split}.json"


def lr_schedule(r: dict, global_batch: int):
    """Linear warmup from ``warmup_factor`` over ``warmup_steps``, then x``gamma`` at each of
    ``decay_steps``. Step counts are given at ``optimizer.base_batch`` and scaled to ``global_batch``."""
    s = r["schedule"]
    scale = r["optimizer"].get("base_batch", 16) / global_batch
    warmup = round(s.get("warmup_steps", 0) * scale)
    warmup_factor = s.get("warmup_factor", 1 / 3)
    milestones = [round(m * scale) for m in s.get("decay_steps", [])]
    gamma = s.get("gamma", 0.1)

    def factor(step: int) -> float:
        f = gamma ** sum(step >= m for m in milestones)
        if step < warmup:
            f *= warmup_factor + (1 - warmup_factor) * step / warmup
        return f

    return factor


def read_backbone(name_or_path: str, registry: str, r: dict) -> dict:
    """ResNet-50 trunk weights (a registry name or a file), checked to fit the recipe's model before a
    run writes anything; a one-line SystemExit where they cannot be read or do not fit."""
    from zoo.checkpoints import CheckpointError, fetch, load_registry

    path = Path(name_or_path)
    if not path.is_file():
        try:
            path = fetch(load_registry(registry).get(name_or_path))
        except CheckpointError as e:
            raise SystemExit(f"error: {e}") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: files from the web
        if not isinstance(state, dict):
            raise ValueError(f"holds a {type(state).__name__}, not a state dict")
        load_backbone_state(model_from_recipe(r, 2), state)
    except Exception as e:  # noqa: BLE001 - unpickling and layout problems read the same to a user
        reason = one_line(e)
        raise SystemExit(f"error: backbone weights {path}: {reason[:200]}") from None
    print(f"backbone: ResNet-50 tensors from {path}", file=sys.stderr)
    return state


def read_resume_state(path: Path) -> dict:
    """A checkpoint.pt written by this training, loaded; a one-line SystemExit where it is not one."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        reason = one_line(e)
        raise SystemExit(f"error: --resume {path} cannot be read as a checkpoint: {reason[:200]}") from None
    needed = {"model", "optimizer", "scheduler", "scaler", "epoch", "rng", "num_classes"}
    if not isinstance(state, dict) or not needed <= set(state):
        raise SystemExit(
            f"error: --resume {path} is not a Mask R-CNN training checkpoint (maskrcnn.train's checkpoint.pt)"
        )
    return state


def save_checkpoint(path: Path, **state) -> None:
    from zoo.io import atomic_write

    with atomic_write(path) as tmp:
        torch.save(state, tmp)


def mlperf_log_path(results_dir: Path, start_epoch: int) -> Path:
    """``mlperf.log`` for a run from epoch 0 (replaced: one run per file, as the checker wants),
    ``mlperf_from_epoch<N>.log`` for a run resumed after epoch N."""
    return results_dir / ("mlperf.log" if start_epoch == 0 else f"mlperf_from_epoch{start_epoch}.log")


def log_mlperf_hyperparameters(mlperf, r: dict, lr: float, global_batch: int) -> None:
    """The maskrcnn keys of the MLPerf rules (training 3.1.0) with this recipe's values."""
    s, d, m = r["schedule"], r["data"], r.get("model", {})
    scale = r["optimizer"].get("base_batch", 16) / global_batch
    min_size = d.get("min_size", 800)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(r.get("accumulate", 1))
    mlperf.hyperparameters(
        opt_base_learning_rate=lr,
        opt_learning_rate_warmup_steps=round(s.get("warmup_steps", 0) * scale),
        opt_learning_rate_warmup_factor=s.get("warmup_factor", 1 / 3),
        opt_learning_rate_decay_factor=s.get("gamma", 0.1),
        opt_learning_rate_decay_steps=[round(x * scale) for x in s.get("decay_steps", [])],
        num_image_candidates=m.get("rpn_post_nms_top_n_train", 2000),
        min_image_size=min(min_size) if isinstance(min_size, list) else min_size,
        max_image_size=d.get("max_size", 1333),
    )


def train_step(ddp, micro_batches, optimizer, scaler, *, device, amp: str, accumulate: int = 1, clip=None):
    """One optimizer step over ``accumulate`` micro-batches drawn from ``micro_batches`` (an iterator of
    ``(images, targets)``); the step ``maskrcnn.benchmark`` times. Returns the summed loss (a tensor:
    no host sync) and the last micro-batch's loss parts."""
    model = ddp.module if hasattr(ddp, "no_sync") else ddp
    distributed = hasattr(ddp, "no_sync")
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for k in range(accumulate):
        images, tgts = next(micro_batches)
        images = [im.to(device, non_blocking=True) for im in images]
        tgts = [{key: (v.to(device) if torch.is_tensor(v) else v) for key, v in t.items()} for t in tgts]
        # Gradients are summed over micro-steps; DDP reduces only on the last one.
        sync = ddp.no_sync() if distributed and k < accumulate - 1 else contextlib.nullcontext()
        with sync:
            with autocast(device, amp):
                losses = ddp(images, tgts)
            loss = sum(losses.values()) / accumulate
            scaler.scale(loss).backward()
        total = total + loss.detach()
    if clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    return total, losses


def train(a: argparse.Namespace) -> dict:
    """Train as ``a`` says; returns {"epochs", "losses", "maps" (epoch -> {"BBOX", "SEGM", ...}), "model"}.

    RESULTS_DIR gets checkpoint.pt, model.pt, metrics.jsonl (+ tensorboard/) and the MLPerf log
    (:func:`mlperf_log_path`, benchmark "maskrcnn"; ``python -m zoo.mlperf`` checks it).
    """
    from zoo.mlperf import MLPerfLogger

    r = load_config(a)
    results_dir = Path(a.results_dir)
    resume_from = zoo.cli.resolve_resume(a.resume, results_dir / "checkpoint.pt")
    root = data_root(a)  # before the MLPerf log is opened: a mistyped path leaves no results folder behind
    for split in (a.train_split, a.val_split):
        for path in split_paths(root, split):
            if not path.exists():
                raise SystemExit(f"error: {path} does not exist (scripts/download_data.sh prepares COCO)")
    state = read_resume_state(resume_from) if resume_from else None
    backbone = r.get("model_init", {}).get("backbone")
    backbone_state = read_backbone(backbone, a.registry, r) if backbone and state is None else None
    env, device = init_distributed(a.device)
    if state is not None and env.is_primary:
        print(f"resuming from {resume_from} at epoch {state['epoch']}", file=sys.stderr)
    mlperf_path = mlperf_log_path(results_dir, state["epoch"] if state else 0)
    if env.is_primary:
        results_dir.mkdir(parents=True, exist_ok=True)
        mlperf_path.unlink(missing_ok=True)
    with MLPerfLogger(mlperf_path, "maskrcnn", enabled=env.is_primary) as mlperf:
        mlperf.cache_clear(False)  # the page cache is not dropped before a run
        mlperf.init_start()
        mlperf.seed(a.seed)
        return train_run(a, r, root, env, device, state, mlperf, backbone_state)


def train_run(
    a, r: dict, root: Path, env, device, state: dict | None, mlperf, backbone_state: dict | None = None
) -> dict:
    """The run itself, inside ``mlperf``'s init_start ... run_stop; ``state`` a checkpoint to continue,
    ``backbone_state`` trunk weights to start from (:func:`read_backbone`)."""
    from zoo.log import MetricsLogger

    rank, world, primary = env.rank, env.world_size, env.is_primary
    seed_everything(a.seed)
    batch, accumulate, d = r["batch_size"], r.get("accumulate", 1), r["data"]
    train_loader = build_loader(
        *split_paths(root, a.train_split),
        train=True,
        batch_size=batch,
        workers=d.get("workers", 0),
        world_size=world,
        rank=rank,
        seed=a.seed,
    )
    val_loader = build_loader(
        *split_paths(root, a.val_split),
        train=False,
        batch_size=r["eval"].get("batch_size", batch),
        workers=d.get("workers", 0),
        world_size=world,
        rank=rank,
    )
    ds = train_loader.dataset
    if val_loader.dataset.num_classes > ds.num_classes:
        raise SystemExit(f"error: {a.val_split} has category ids beyond those of {a.train_split}")
    micro_steps = len(train_loader)
    steps_per_epoch = (
        micro_steps // accumulate if a.steps is None else min(a.steps, micro_steps // accumulate)
    )
    if steps_per_epoch == 0:
        raise SystemExit(f"error: no full optimizer step of {batch} x {accumulate} images per process")

    model = model_from_recipe(r, ds.num_classes)
    if backbone_state is not None:
        load_backbone_state(model, backbone_state)
    model = prepare_for_speed(model.to(device), r, device)
    o = r["optimizer"]
    global_batch = batch * accumulate * world
    lr = o["base_lr"] * global_batch / o.get("base_batch", 16)
    optimizer = torch.optim.SGD(parameter_groups(model, o["weight_decay"]), lr=lr, momentum=o["momentum"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(r, global_batch))
    amp = r.get("amp", "bf16")
    scaler = grad_scaler(device, amp)
    clip = o.get("clip_grad_norm")

    results_dir = Path(a.results_dir)
    ckpt_path = results_dir / "checkpoint.pt"
    start_epoch = 0
    if state is not None:
        if state["num_classes"] != ds.num_classes:
            raise SystemExit(
                f"error: the checkpoint has {state['num_classes'] - 1} classes, {a.train_split} has {ds.num_classes - 1}"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"][rank] if rank < len(state["rng"]) else state["rng"][0])
        start_epoch = state["epoch"]

    ddp = distributed_model(model, device, static_graph=False) if world > 1 else model
    epochs = r["epochs"]
    stop = min(epochs, a.stop_epoch) if a.stop_epoch else epochs
    samples_per_epoch = steps_per_epoch * global_batch
    log_mlperf_hyperparameters(mlperf, r, lr, global_batch)
    mlperf.train_samples(samples_per_epoch)
    mlperf.eval_samples(len(val_loader.dataset))
    log = MetricsLogger(
        str(results_dir / "metrics.jsonl") if primary else None,
        enabled=primary,
        total_steps=steps_per_epoch * stop,
        desc="train",
    )
    scorer = AsyncScorer(coco_map) if a.async_eval and primary else None
    eval_epochs = set(r["eval"].get("epochs", []))
    targets = {"BBOX": r["eval"].get("target_map"), "SEGM": r["eval"].get("target_mask_map")}
    summary = {"epochs": start_epoch, "losses": [], "maps": {}, "model": model}
    step = start_epoch * steps_per_epoch

    def record_map(epoch: int, stats: dict) -> bool:
        summary["maps"][epoch] = stats
        log.log(step, stats, phase="eval")
        mlperf.eval_accuracy({"BBOX": stats["BBOX"], "SEGM": stats["SEGM"]}, epoch)
        wanted = {k: v for k, v in targets.items() if v is not None}
        return bool(wanted) and all(stats[k] >= v for k, v in wanted.items())

    mlperf.init_stop()
    mlperf.run_start()
    reached = False
    for epoch in range(start_epoch, stop):
        train_loader.batch_sampler.set_epoch(epoch)
        mlperf.epoch_start(epoch + 1, samples=epoch * samples_per_epoch)
        ddp.train()
        t0 = time.time()
        micro = iter(train_loader)
        for i in range(steps_per_epoch):
            total, losses = train_step(
                ddp, micro, optimizer, scaler, device=device, amp=amp, accumulate=accumulate, clip=clip
            )
            scheduler.step()
            step += 1
            if i % a.log_every == 0 or i == steps_per_epoch - 1:
                value = float(total)  # one host sync per log line, not per step
                summary["losses"].append(value)
                parts = {k: float(v.detach()) for k, v in losses.items()}
                log.progress(step, global_batch, {"loss": value, "lr": scheduler.get_last_lr()[0]})
                log.log(step, {"loss": value, "epoch": epoch + 1, **parts})
        seconds = time.time() - t0
        mlperf.epoch_stop(epoch + 1, samples=(epoch + 1) * samples_per_epoch)
        log.log(
            step,
            {"epoch": epoch + 1, "images_per_s": samples_per_epoch / seconds},
            units={"images_per_s": "img/s"},
        )
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
                    num_classes=ds.num_classes,
                    category_names=ds.category_names,
                )
        if (epoch + 1) in eval_epochs:
            mlperf.eval_start(epoch + 1)
            with MetricsLogger(
                enabled=primary, total_steps=len(val_loader), desc=f"eval epoch {epoch + 1}"
            ) as bar:
                results = detect_dataset(model, val_loader, device=device, amp=amp, progress=bar)
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
                print(f"target mAP {targets} reached after epoch {epoch + 1}", file=sys.stderr)
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
            recipe=r,
            num_classes=ds.num_classes,
            category_names=ds.category_names,
        )
    log.close()
    close_distributed()
    return summary


@entry_point
def main(argv=None) -> None:
    a = parse_args(argv)
    summary = train(a)
    for e, stats in sorted(summary["maps"].items()):
        print(f"epoch {e}: box mAP {stats['BBOX']:.4f}, mask mAP {stats['SEGM']:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
