"""Train ResNet-50 v1.5 with Gluon: one process drives all its GPUs through a kvstore (processes.py says how
devices, processes and nodes are joined).

Checkpoints (zoo.mx.save_training_checkpoint: parameters, trainer states, the loss scaler's state, epoch
and step) are written at the end of every epoch of run.checkpoint_every; the data order, augmentation and
MXNet RNG of an epoch are seeded from the epoch number, so ``--resume`` continues exactly the run that was
interrupted. A SIGTERM (a scheduler's preemption) is taken after the step in progress through
zoo.cli.Preemption: every process stops after the same step, a checkpoint of that step (with the steps
done in its epoch, ``step_in_epoch``) is written and the run ends with exit status 143; ``--resume auto``
skips the epoch's batches already trained on and continues as the unbroken run would. The loop is
engine.py's, the step step.py's; this module parses, builds and wires them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.checkpoint_folder import CHECKPOINT_NAME, checkpoint_pointer
from zoo.cli import add_run_args, add_target_arg, entry_point, parse_args, resolve_resume
from zoo.cli import recipe_from_args as recipe_from_cli
from zoo.errors import UserError
from zoo.io import atomic_write, remove_stale_temps
from zoo.recipe import run_config
from zoo.retention import improves

from . import DEFAULT_RECIPE
from .records import check_dataset, read_classes, require_classes

if TYPE_CHECKING:
    from resnet50_mx.data import DataSpec

MLPERF_BENCHMARK = "resnet"
# This model's flags that set a recipe key; --amp, --batch-size, --epochs, --seed, --log-every and
# --target-top1 set the run: section (zoo.cli.RUN_FLAGS).
FLAG_TO_RECIPE = {
    "data_dir": "data.dir",
    "data_backend": "data.backend",
    "gpus": "dist.gpus",
    "kvstore": "dist.kvstore",
    "layout": "model.layout",
    "image_size": "data.image_size",
    "num_classes": "model.num_classes",
    "lr_per_256": "optimizer.lr_per_256",
}


def check_run(run) -> None:
    """What this model's loop does of the run: section: epochs, and intervals that end an epoch."""
    if run.steps is not None:
        raise UserError(
            "run.steps: this model's runs are counted in epochs: set run.epochs (and run.steps: null)"
        )
    if run.accumulation != 1:
        raise UserError(
            f"run.accumulation must be 1, not {run.accumulation}: the step accumulates no gradients"
        )
    for key, interval in (("eval_every", run.eval_every), ("checkpoint_every", run.checkpoint_every)):
        if interval is not None and interval.unit != "epochs":
            raise UserError(f"run.{key} must be 'N epochs' or null, not '{interval}': it ends an epoch")


def check_data(recipe: dict, evaluating: bool) -> dict:
    """Check the RecordIO files the run reads (records.check_dataset) and that the recipe's class count
    is the data's; returns what was found per split ({} for synthetic data). Needs no MXNet."""
    data_cfg = recipe["data"]
    if data_cfg["backend"] == "synthetic":
        return {}
    if data_cfg.get("dir") is None:
        raise UserError(
            f"--data-backend {data_cfg['backend']} needs --data-dir (or use --data-backend synthetic)"
        )
    splits = ["train", "val"] if evaluating else ["train"]
    checked = check_dataset(data_cfg["dir"], splits, threads=data_threads(recipe))
    require_classes(
        data_cfg["dir"],
        checked,
        int(recipe["model"]["num_classes"]),
        "the recipe (model.num_classes, --num-classes)",
        "pass --num-classes {count}",
    )
    return checked


def data_threads(recipe: dict) -> int:
    """data.threads, the decoding threads; a one-line error unless a positive integer."""
    threads = recipe["data"].get("threads", 4)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UserError(f"data.threads must be a positive integer (decoding threads), not {threads!r}")
    return threads


def log_mlperf_settings(mlperf, recipe: dict, run, *, global_batch, base_lr, train_samples, eval_samples):
    """The run's settings as MLPerf keys (the resnet ruleset's names); ``eval_samples`` None: no evaluation."""
    opt = recipe["optimizer"]
    name = opt.get("name", "sgd")
    prefix = "sgd_" if name == "sgd" else ""  # the ruleset spells the SGD keys sgd_opt_*
    mlperf.seed(run.seed)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(train_samples)
    if eval_samples is not None:
        mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name=name,
        **{
            f"{prefix}opt_base_learning_rate": base_lr,
            f"{prefix}opt_momentum": opt.get("momentum", 0.9),
            f"{prefix}opt_weight_decay": opt.get("weight_decay", 1e-4),
        },
        opt_learning_rate_warmup_epochs=float(recipe["schedule"].get("warmup_epochs", 0)),
        model_bn_span=run.batch_per_gpu,  # BatchNorm statistics are per device
    )


def devices(recipe: dict, precision: str, horovod: bool):
    """(Processes, contexts) of the recipe's dist: section; AMP initialised for ``precision``."""
    import mxnet as mx
    from mxnet.contrib import amp as mx_amp

    from resnet50_mx.processes import Processes, parse_gpus

    gpus = recipe["dist"]["gpus"]
    gpus = parse_gpus(None if gpus in (0, None) else str(gpus))
    procs = Processes(recipe["dist"]["kvstore"], len(gpus), horovod)
    if procs.hvd is not None:
        gpus = [procs.local_rank]
    if precision == "fp16" and not gpus:
        raise UserError(
            "--amp fp16 needs a GPU (MXNet's float16 kernels are GPU-only); on CPU use --amp bf16"
        )
    if precision != "fp32":
        # Must precede building the network: AMP rewrites the operator namespaces.
        mx_amp.init(target_dtype="float16" if precision == "fp16" else "bfloat16")
    return procs, [mx.gpu(g) for g in gpus] or [mx.cpu()]


def data_spec(recipe: dict, run, procs, ctx) -> DataSpec:
    from resnet50_mx.data import DataSpec

    data_cfg, model_cfg = recipe["data"], recipe["model"]
    threads = data_threads(recipe)
    return DataSpec(
        backend=data_cfg["backend"],
        data_dir=data_cfg.get("dir"),
        batch_size=run.batch_per_gpu * len(ctx),
        image_size=int(data_cfg["image_size"]),
        num_classes=int(model_cfg["num_classes"]),
        num_parts=procs.world,
        part_index=procs.rank,
        threads=threads,
        synthetic_batches=int(data_cfg.get("synthetic_batches", 20)),
        layout=model_cfg.get("input_layout", "NCHW"),
        random_resized_crop=bool(data_cfg.get("random_resized_crop", True)),
        min_random_area=float(data_cfg.get("min_random_area", 0.08)),
        mirror=bool(data_cfg.get("mirror", True)),
    )


def run_training(recipe: dict, args) -> dict:
    """Train as the recipe says; returns the final metrics (train loss, top1/top5 if evaluated)."""
    from zoo.checkpoint_folder import read_state

    from resnet50_mx import CHECKPOINT_KIND, WHAT
    from resnet50_mx.processes import gpu_ids

    if os.environ.get("DMLC_ROLE") in ("scheduler", "server"):
        import mxnet  # noqa: F401 - a scheduler or server process serves inside the import (processes.py)
    run = run_config(recipe, args.recipe)
    check_run(run)
    layout = recipe["model"].get("layout", "NCHW")
    evaluating = not args.no_eval and recipe["data"]["backend"] != "synthetic"
    # Everything a run reads is checked before it writes anything, and what needs no MXNet before it is
    # imported: --gpus, the data (the C++ reader would crash on a bad record), its class count, the state
    # of the checkpoint it continues (its parameters are read once MXNet is).
    gpus = recipe["dist"]["gpus"]
    gpu_ids(None if gpus in (0, None) else str(gpus))  # devices() also checks that the machine has them
    checked = check_data(recipe, evaluating)
    results = Path(args.results_dir)
    resume = resume_from(args)
    if resume:
        read_state(resume, name=CHECKPOINT_KIND, what=WHAT)

    import mxnet as mx
    from zoo.log import MetricsLogger
    from zoo.mlperf import CLOSED_TARGETS, MLPerfLogger, log_path
    from zoo.mx import load_training_checkpoint, save_training_checkpoint

    from resnet50_mx.data import build_loader
    from resnet50_mx.engine import evaluate, train_one_epoch
    from resnet50_mx.model import build_model, count_parameters
    from resnet50_mx.step import (
        TrainStep,
        build_trainer,
        learning_rate,
        loss_scaler_state,
        restore_loss_scaler,
    )

    procs, ctx = devices(recipe, run.precision, args.horovod)
    spec = data_spec(recipe, run, procs, ctx)
    resumed = load_training_checkpoint(resume, name=CHECKPOINT_KIND, what=WHAT) if resume else None
    if resumed:
        check_resume_fits(resume, resumed, num_classes=spec.num_classes, layout=layout)
    if procs.primary:
        remove_stale_temps(results)  # an atomic write killed midway left these
    mlperf_log = log_path(results, resumed=resumed is not None) if procs.primary else None
    with MLPerfLogger(mlperf_log, MLPERF_BENCHMARK, enabled=procs.primary) as mlperf:
        mlperf.cache_clear(False)  # the page cache is not dropped: the first epoch may read from it
        mlperf.init_start()
        global_batch = spec.batch_size * procs.world
        base_lr = float(recipe["optimizer"]["lr_per_256"]) * global_batch / 256

        mx.random.seed(run.seed)
        net = build_model(
            spec.num_classes,
            layout=layout,
            input_layout=spec.layout,
            zero_init_last_gamma=recipe["model"].get("zero_init_last_gamma", False),
        )
        net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0), ctx=ctx)
        trainer = build_trainer(net, recipe, procs, run.precision, base_lr)
        start_epoch, step, best, skip = 0, 0, {}, 0
        if resumed:
            load_training_checkpoint(resume, net, trainer, name=CHECKPOINT_KIND, what=WHAT, ctx=ctx)
            restore_loss_scaler(trainer, resumed.get("loss_scaler"))
            start_epoch, step, best = resumed["epoch"], resumed["step"], resumed.get("best", {})
            skip = resumed.get("step_in_epoch", 0)  # a preemption's checkpoint: the epoch's steps done
        preemption = procs.preemption()  # SIGTERM: a checkpoint after the step, then exit 143
        if not args.no_hybridize:
            net.hybridize(static_alloc=True, static_shape=True)

        first = build_loader(spec, train=True, epoch=start_epoch, seed=run.seed, ctx=ctx[0])
        steps_per_epoch = min(first.batches, args.steps_per_epoch or first.batches)
        total_steps = run.epochs * steps_per_epoch
        warmup = int(round(float(recipe["schedule"].get("warmup_epochs", 0)) * steps_per_epoch))
        schedule = dict(
            base_lr=base_lr, warmup_steps=warmup, total_steps=total_steps, kind=recipe["schedule"]["kind"]
        )
        train_step = TrainStep(
            net, trainer, ctx, num_classes=spec.num_classes, smoothing=float(recipe["loss"].get("label_smoothing", 0.0)),
            amp=run.precision, step_batch=global_batch if procs.hvd is None else spec.batch_size,
        )  # fmt: skip
        logger = MetricsLogger(
            str(results / "metrics.jsonl"), enabled=procs.primary, total_steps=total_steps, desc="train"
        )
        if procs.primary:
            print(
                f"ResNet-50 v1.5: {count_parameters(net):,} parameters, {procs.world} process(es) x "
                f"{len(ctx)} device(s) ({', '.join(map(str, ctx))}), global batch {global_batch}, lr {base_lr:g}, "
                f"amp {run.precision}, kvstore {procs.kv.type if procs.kv else 'none'}, {steps_per_epoch} steps/epoch",
                file=sys.stderr,
            )
        log_mlperf_settings(
            mlperf, recipe, run, global_batch=global_batch, base_lr=base_lr, train_samples=first.num_samples,
            eval_samples=checked["val"].records if evaluating else None,
        )  # fmt: skip
        mlperf.init_stop()
        mlperf.run_start()
        metrics: dict = {}
        # The run's status: success once validation top-1 reaches the target (MLPerf's 75.9% without one).
        quality = run.target.value if run.target.value is not None else 100 * CLOSED_TARGETS[MLPERF_BENCHMARK]
        status = "aborted"

        def save(step: int, epoch: int, *, step_in_epoch: int = 0, improved: bool = False) -> None:
            """A checkpoint (on the primary process) after ``step``: ``epoch`` epochs done, and
            ``step_in_epoch`` steps of the next one (a preemption's)."""
            if not procs.primary:
                return
            position = {"step_in_epoch": step_in_epoch} if step_in_epoch else {}
            save_training_checkpoint(
                results / CHECKPOINT_NAME, net, trainer, name=CHECKPOINT_KIND, step=step, epoch=epoch,
                recipe=recipe, keep=run.keep_checkpoints, mark_best=improved,
                best=best, metrics=metrics, loss_scaler=loss_scaler_state(trainer),
                num_classes=spec.num_classes, classes=read_classes(spec.data_dir), layout=layout,
                input_layout=spec.layout, image_size=spec.image_size, **position,
            )  # fmt: skip

        with preemption, logger:
            for epoch in range(start_epoch, run.epochs):
                mlperf.epoch_start(epoch + 1, samples=step * global_batch)
                mx.random.seed(run.seed + 1000 * epoch + procs.rank)
                loader = (
                    first
                    if epoch == start_epoch
                    else build_loader(spec, train=True, epoch=epoch, seed=run.seed, ctx=ctx[0])
                )
                step, reading = train_one_epoch(
                    train_step, loader, first_step=step, steps_per_epoch=steps_per_epoch, run=run, logger=logger,
                    lr_at=lambda done: learning_rate(done, **schedule), world=procs.world,
                    skip=skip if epoch == start_epoch else 0, preemption=preemption,
                    save=lambda done, in_epoch, epoch=epoch: save(done, epoch, step_in_epoch=in_epoch),
                )  # fmt: skip
                mlperf.epoch_stop(epoch + 1, samples=step * global_batch)
                # no reading: a preemption came after the epoch's last step, and the epoch ends here
                metrics = {
                    key: reading[name]
                    for key, name in (("loss", "loss"), ("train_top1", "top1"), ("throughput", "throughput"))
                    if name in reading
                }
                last, improved = epoch + 1 == run.epochs, False
                if evaluating and (last or run.eval_every and run.eval_every.due(epoch + 1, step)):
                    mlperf.eval_start(epoch + 1, samples=step * global_batch)
                    val = build_loader(spec, train=False, epoch=epoch, seed=run.seed, ctx=ctx[0])
                    with MetricsLogger(
                        enabled=procs.primary, total_steps=val.batches, desc="eval"
                    ) as progress:
                        scores = evaluate(net, val, ctx, progress)
                    mlperf.eval_stop(epoch + 1, samples=step * global_batch)
                    mlperf.eval_accuracy(scores["top1"] / 100, epoch + 1, samples=step * global_batch)
                    logger.log(step, scores, phase="eval")
                    metrics = {**metrics, **scores}
                    improved = improves("top1", scores["top1"], best.get("top1"))
                    if improved:
                        best = {"top1": scores["top1"], "top5": scores["top5"], "epoch": epoch + 1}
                reached = "top1" in metrics and run.target.reached(metrics["top1"])
                stopping = reached or args.stop_after and epoch + 1 - start_epoch >= args.stop_after
                procs.barrier()
                due = run.checkpoint_every and run.checkpoint_every.due(epoch + 1, step)
                if due or last or stopping or improved:
                    save(step, epoch + 1, improved=improved)
                procs.barrier()
                if metrics.get("top1", 0) >= quality:
                    status = "success"
                if stopping:
                    break  # the target is reached, or a time-limited job ends: --resume continues from here
            mlperf.run_stop(status)
    finals = ["final.params"] if procs.primary else []
    if procs.world > 1:  # every worker's copy, to check that the replicas agree
        finals.append(f"final.rank{procs.rank}.params")
    for name in finals:
        with atomic_write(results / name) as tmp:
            net.save_parameters(str(tmp))
    return dict(metrics, best=best, step=step, rank=procs.rank)


def check_resume_fits(path, state: dict, *, num_classes: int, layout: str) -> None:
    """A one-line error, before anything is written, when the checkpoint is not this run's network."""
    for key, ours in (("num_classes", num_classes), ("layout", layout)):
        if key in state and state[key] != ours:
            raise UserError(
                f"cannot resume from {path}: it has {key} {state[key]}, this run {ours} "
                "(use the checkpoint's recipe, or --resume none)"
            )
    found = int(state["params"]["fc.weight"].shape[0])
    if found != num_classes:
        raise UserError(
            f"cannot resume from {path}: its weights have {found} classes, this run {num_classes}"
        )


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    from resnet50_mx import BACKENDS, LAYOUTS

    p = argparse.ArgumentParser(
        prog="train.sh",
        description="Train ResNet-50 v1.5 (MXNet Gluon). Flags override the recipe; --set key=value overrides any key.",
    )
    add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_help="folder with train.rec/.idx and val.rec/.idx ($DATA_DIR; scripts/download_data.sh)",
    )
    add_target_arg(p, "top1", unit="%", example=75.9)
    p.add_argument("--data-backend", choices=BACKENDS, help="input pipeline")
    p.add_argument("--synthetic", action="store_true", help="same as --data-backend synthetic")
    p.add_argument(
        "--gpus", help="GPU count ('0': CPU) or comma list of ids ('2,3'; one id: '2,') (dist.gpus)"
    )
    p.add_argument(
        "--kvstore",
        help="device | nccl | dist_sync | dist_device_sync (dist_*: set by the launcher) (dist.kvstore)",
    )
    p.add_argument("--horovod", action="store_true", help="Horovod instead of the kvstore (where installed)")
    p.add_argument("--layout", choices=LAYOUTS, help="convolution layout (NHWC is fastest on GPU)")
    p.add_argument("--epochs", type=int, help="run.epochs")
    p.add_argument("--batch-size", type=int, help="per device (run.batch_per_gpu)")
    p.add_argument("--image-size", type=int)
    p.add_argument("--num-classes", type=int)
    p.add_argument("--lr-per-256", type=float, help="learning rate per 256 images of global batch")
    p.add_argument(
        "--steps-per-epoch", type=int, help="cap the steps of each epoch (smoke tests, benchmarks)"
    )
    p.add_argument("--seed", type=int, help="run.seed")
    p.add_argument("--log-every", type=int, help="steps between train readings (run.log_every)")
    p.add_argument("--no-eval", action="store_true", help="skip validation after each epoch")
    p.add_argument("--no-hybridize", action="store_true", help="run the network imperatively")
    p.add_argument("--stop-after", type=int, help="end this job after N epochs (for time-limited jobs)")
    return p


def recipe_from_args(args) -> dict:
    """The recipe with the flags applied (zoo.cli.RUN_FLAGS into run:, FLAG_TO_RECIPE elsewhere)."""
    for flag in ("steps_per_epoch", "stop_after"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive integer, not {value}")
    recipe = recipe_from_cli(args, FLAG_TO_RECIPE)
    target = recipe["run"]["target"]["value"]
    if target is not None and not 1 < float(target) <= 100:
        raise UserError(f"--target-top1 is a percentage in (1, 100], e.g. 75.9; got {target}")
    if args.synthetic:
        recipe["data"]["backend"] = "synthetic"
    elif args.data_dir and not args.data_backend and recipe["data"]["backend"] == "synthetic":
        recipe["data"]["backend"] = "recordio"
    return recipe


def resume_from(args) -> Path | None:
    """The checkpoint this run continues (``--resume``, zoo.cli.resolve_resume), or None."""
    return resolve_resume(args.resume, checkpoint_pointer(args.results_dir))


@entry_point
def main(argv=None):
    args = parse_args(build_parser(), argv)
    result = run_training(recipe_from_args(args), args)
    if result.get("rank", 0) == 0:
        shown = {k: v for k, v in result.items() if k in ("loss", "train_top1", "top1", "top5", "best")}
        print(json.dumps(shown))


if __name__ == "__main__":
    main()
