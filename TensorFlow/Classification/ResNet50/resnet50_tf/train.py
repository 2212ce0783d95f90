"""Train ResNet-50 v1.5 with a recipe: tf.distribute (or Horovod), mixed precision, XLA, exact resume.

    python -m resnet50_tf.train --recipe configs/resnet50_1gpu_90ep.yaml --data-dir /data/tfrecords \
        --results-dir results/run1 --amp bf16

The run directory holds `run.json` (model and data description), `checkpoint/` (zoo.tf's training
checkpoint: model, optimizer with its loss scale, step, epoch and recipe; written as run.checkpoint_every
says and at the end), `metrics.jsonl`, and `mlperf.log` (the MLPerf training event sequence, benchmark
"resnet", checked by zoo.mlperf.check_log; a resumed run writes its own `mlperf_resume<N>.log`).
`--resume auto` continues from the checkpoint; the resumed run sees the same batches and ends with the
same weights as an unbroken one. A SIGTERM (a scheduler's preemption) writes a checkpoint after the step in
progress, on every worker the same step, and ends the run with exit status 143 (zoo.cli.Preemption), so
that `--resume auto` loses no step. Without `--resume`, a results dir that already holds a checkpoint is an
error (nothing is overwritten unasked). The loop itself is engine.py's; the step is step.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from zoo.checkpoint_folder import CHECKPOINT_NAME, checkpoint_pointer
from zoo.cli import add_run_args, add_target_arg, entry_point, recipe_from_args, resolve_resume
from zoo.cli import parse_args as parse_shared_args
from zoo.errors import UserError
from zoo.io import atomic_write, remove_stale_temps
from zoo.recipe import run_config
from zoo.retention import improves

from resnet50_tf import DEFAULT_RECIPE
from resnet50_tf.checkpoint import read_state

DATA_HELP = "TFRecord folder: dataset.json + train-*/validation-* shards ($DATA_DIR)"
DATA_BACKENDS = ("tfdata", "dali", "synthetic")
MLPERF_BENCHMARK = "resnet"
# This model's flags that set a recipe key; --amp, --batch-size, --epochs, --seed, --log-every and
# --target-top1 set the run: section (zoo.cli.RUN_FLAGS).
FLAG_TO_RECIPE = {"image_size": "data.image_size"}


def parse_args(argv=None) -> argparse.Namespace:
    """The training flags: zoo.cli's shared ones, then this model's; old spellings end in one line."""
    p = argparse.ArgumentParser(
        prog="train.sh",
        description="Train ResNet-50 v1.5 (TensorFlow 2 / Keras) from a recipe; flags override the recipe.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_run_args(p, default_recipe=DEFAULT_RECIPE, data_help=DATA_HELP)
    add_target_arg(p, "top1", unit="% validation top-1", example=75.9)
    p.add_argument("--data-backend", choices=DATA_BACKENDS, default="tfdata")
    p.add_argument("--synthetic", action="store_true", help="same as --data-backend synthetic")
    p.add_argument(
        "--xla", action="store_true", help="compile the forward/backward pass with XLA (jit_compile)"
    )
    p.add_argument("--distribution", default="auto", help="auto, default, mirrored, multiworker or horovod")
    p.add_argument("--batch-size", type=int, help="per-replica batch (run.batch_per_gpu)")
    p.add_argument("--epochs", type=int, help="run.epochs")
    p.add_argument("--steps-per-epoch", type=int, help="default: train images // global batch")
    p.add_argument("--max-steps", type=int, help="stop after this many global steps (schedule unchanged)")
    p.add_argument("--image-size", type=int, help="data.image_size")
    p.add_argument("--num-classes", type=int, help="synthetic data only (TFRecords bring their classes)")
    p.add_argument("--checkpoint-steps", type=int, help="checkpoint every N steps (run.checkpoint_every)")
    p.add_argument(
        "--keep-checkpoints",
        type=int,
        help="checkpoints kept in RESULTS_DIR/checkpoint (run.keep_checkpoints)",
    )
    p.add_argument("--init-checkpoint", help="start from these weights (a run dir, checkpoint or .h5)")
    p.add_argument("--no-eval", action="store_true", help="skip validation")
    p.add_argument("--seed", type=int, help="run.seed")
    p.add_argument(
        "--deterministic", action="store_true", help="deterministic kernels (bit-exact reruns; slower on GPU)"
    )
    p.add_argument("--log-every", type=int, help="steps between metrics lines (run.log_every)")
    p.add_argument(
        "--dump-weights",
        metavar="PATH",
        help="at the end, every worker writes its weights to PATH ({worker} = index)",
    )
    args = parse_shared_args(p, argv)
    for flag in ("steps_per_epoch", "max_steps", "num_classes", "keep_checkpoints", "checkpoint_steps"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive integer, not {value}")
    if args.synthetic:
        args.data_backend = "synthetic"
    if args.deterministic and args.xla:
        p.error("--deterministic and --xla cannot be combined: XLA has no deterministic max-pool gradient")
    if args.data_backend != "synthetic" and not args.data_dir:
        p.error("--data-dir (or $DATA_DIR) is required unless --synthetic")
    return args


def build_recipe(args) -> dict:
    """The recipe with the flags applied, its run: section checked for what this model's loop does."""
    recipe = recipe_from_args(args, FLAG_TO_RECIPE)
    if args.checkpoint_steps:
        recipe["run"]["checkpoint_every"] = f"{args.checkpoint_steps} steps"
    if args.keep_checkpoints:
        recipe["run"]["keep_checkpoints"] = args.keep_checkpoints
    run = run_config(recipe, args.recipe)
    if run.accumulation != 1:
        raise UserError(
            f"run.accumulation must be 1, not {run.accumulation}: the step accumulates no gradients"
        )
    if run.eval_every is not None and run.eval_every.unit != "epochs":
        raise UserError(
            f"run.eval_every must be 'N epochs' or null, not '{run.eval_every}': evaluation ends an epoch"
        )
    return recipe


def read_data(args):
    """(dataset info or None for synthetic data, class names, the shards' length pass or None), checked
    before the run writes anything and before TensorFlow is imported; the content pass needs it
    (tfrecords.check_dataset, given these lengths)."""
    from resnet50_tf.tfrecords import check_lengths, read_dataset_info

    if args.data_backend == "synthetic":
        return None, [str(i) for i in range(args.num_classes or 1000)], None
    info = read_dataset_info(args.data_dir)
    lengths = check_lengths(info, ["train"] if args.no_eval else ["train", "val"])
    if args.num_classes is not None and args.num_classes != len(info.classes):
        raise UserError(
            f"--num-classes {args.num_classes}, but {info.data_dir / 'dataset.json'} lists "
            f"{len(info.classes)} classes (TFRecords bring their classes: leave --num-classes out)"
        )
    return info, info.classes, lengths


def steps_of_an_epoch(args, info, global_batch: int) -> int:
    if args.steps_per_epoch:
        return args.steps_per_epoch
    if info is None:
        return 100
    if info.train_examples < global_batch:
        raise UserError(
            f"{info.train_examples} training images are fewer than one global batch of {global_batch}"
        )
    return info.train_examples // global_batch


def mlperf_hyperparameters(recipe: dict, global_batch: int, replica_batch: int) -> dict:
    """The recipe's optimizer as MLPerf ResNet keys (sgd_opt_* or lars_opt_*); model_bn_span is the
    per-replica batch, the images each batch norm normalises over."""
    from resnet50_tf.optim import peak_learning_rate

    optimizer, schedule = recipe["optimizer"], recipe["schedule"]
    name = optimizer.get("name", "sgd")
    prefix = "lars_opt" if name == "lars" else "sgd_opt"
    warmup_key = (
        "lars_opt_learning_rate_warmup_epochs" if name == "lars" else "opt_learning_rate_warmup_epochs"
    )
    return {
        "opt_name": name,
        f"{prefix}_base_learning_rate": peak_learning_rate(recipe, global_batch),
        f"{prefix}_end_learning_rate": float(schedule.get("end_lr", 0.0)),
        f"{prefix}_momentum": float(optimizer.get("momentum", 0.9)),
        f"{prefix}_weight_decay": float(optimizer.get("weight_decay", 0.0)),
        warmup_key: float(schedule.get("warmup_epochs", 0)),
        "model_bn_span": replica_batch,
    }


def start_mlperf_log(runtime, results_dir: Path, resumed: bool, recipe: dict, info, train_samples: int):
    """The chief's MLPerf logger (zoo.mlperf.log_path names its file), with the run's settings logged."""
    from zoo.mlperf import MLPerfLogger, log_path

    run = run_config(recipe)
    global_batch = run.batch_per_gpu * runtime.num_replicas
    mlperf = MLPerfLogger(
        log_path(results_dir, resumed) if runtime.is_chief else None,
        MLPERF_BENCHMARK,
        enabled=runtime.is_chief,
    )
    mlperf.cache_clear(False)  # the page cache is not dropped (that needs root)
    mlperf.init_start()
    mlperf.seed(run.seed)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(info.train_examples if info else train_samples)
    mlperf.eval_samples(info.val_examples if info else 0)
    mlperf.hyperparameters(**mlperf_hyperparameters(recipe, global_batch, run.batch_per_gpu))
    return mlperf


def write_run_info(results_dir: Path, runtime, recipe: dict, classes: list, global_batch: int) -> None:
    """RESULTS_DIR/run.json: what the run trains (network, classes, image size) and on what."""
    info = {
        "model": "resnet50_v1_5",
        "num_classes": len(classes),
        "classes": classes,
        "image_size": int(recipe["data"]["image_size"]),
        "amp": recipe["run"]["precision"],
        "recipe": recipe,
        "global_batch": global_batch,
        "replicas": runtime.num_replicas,
        "workers": runtime.num_workers,
        "distribution": runtime.kind,
    }
    with atomic_write(results_dir / "run.json") as tmp:
        tmp.write_text(json.dumps(info, indent=1))


@entry_point
def main(argv=None) -> dict:
    args = parse_args(argv)
    recipe = build_recipe(args)
    run = run_config(recipe, args.recipe)
    results_dir = Path(args.results_dir)
    resume_from = resolve_resume(args.resume, checkpoint_pointer(results_dir))
    # Everything the run reads is checked before it writes anything, and what needs no TensorFlow before
    # it is imported: the recipe, the results dir, the data's description and shard lengths, the
    # checkpoint's state.
    info, classes, lengths = read_data(args)
    checkpoint, flag = (
        (resume_from, "--resume") if resume_from else (args.init_checkpoint, "--init-checkpoint")
    )
    if checkpoint and not str(checkpoint).endswith(".h5"):
        read_state(checkpoint, flag)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from zoo.tf import make_runtime

    runtime = make_runtime(args.distribution)  # before any other TF op

    import keras
    import tensorflow as tf
    from zoo.log import MetricsLogger
    from zoo.mlperf import CLOSED_TARGETS
    from zoo.tf import load_training_checkpoint, preemption, save_training_checkpoint

    from resnet50_tf import data
    from resnet50_tf.checkpoint import CHECKPOINT_KIND, WHAT, check_checkpoint, restore_weights
    from resnet50_tf.engine import evaluate, train_one_epoch
    from resnet50_tf.model import resnet50
    from resnet50_tf.optim import build_optimizer
    from resnet50_tf.step import TrainStep, set_precision
    from resnet50_tf.tfrecords import check_dataset, first_line

    keras.utils.set_random_seed(run.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    set_precision(run.precision)
    # what needs TensorFlow: the images decoded (shards no manifest vouches for), the checkpoint's variables
    # (a checkpoint cut short is named before one of other classes)
    if info is not None:
        check_dataset(info, list(lengths), lengths)
    if checkpoint:
        check_checkpoint(checkpoint, len(classes), flag)
    results_dir.mkdir(parents=True, exist_ok=True)
    if runtime.is_chief:  # what a write killed midway left (zoo.tf's checkpoint writer clears its own)
        remove_stale_temps(results_dir)
    global_batch = run.batch_per_gpu * runtime.num_replicas
    steps_per_epoch = steps_of_an_epoch(args, info, global_batch)
    total_steps = run.steps or run.epochs * steps_per_epoch
    last_step = min(total_steps, args.max_steps) if args.max_steps else total_steps
    image_size = int(recipe["data"]["image_size"])

    mlperf = start_mlperf_log(
        runtime, results_dir, resume_from is not None, recipe, info, steps_per_epoch * global_batch
    )

    with runtime.strategy.scope():
        model = resnet50(
            len(classes), image_size=image_size, zero_init_residual=bool(recipe["zero_init_residual"])
        )
        optimizer = build_optimizer(recipe, steps_per_epoch, global_batch, run.precision)
        optimizer.build(model.trainable_variables)
    trained = {"model": model, "optimizer": optimizer}
    step, best = 0, {}
    if resume_from:
        resumed = load_training_checkpoint(resume_from, trained, name=CHECKPOINT_KIND, what=WHAT)
        step, best = resumed["step"], resumed.get("best", {})
        print(f"resumed from {resumed['folder']} at step {step}", file=sys.stderr)
    elif args.init_checkpoint:
        restore_weights(model, args.init_checkpoint, "--init-checkpoint")

    if runtime.is_chief:
        write_run_info(results_dir, runtime, recipe, classes, global_batch)
    train_step = TrainStep(
        runtime, model, optimizer, global_batch, float(recipe["label_smoothing"]), args.xla
    )
    saved_at = [None]

    def save(at: int, mark_best: bool = False) -> None:
        """Every worker saves (collectives may run while variables are read); the chief's is kept.
        ``mark_best``: the evaluation at ``at`` beat the earlier ones (checkpoint/best/)."""
        if saved_at[0] != at or mark_best:  # a best one is written again: its state knows the best
            save_training_checkpoint(
                results_dir / CHECKPOINT_NAME, trained, name=CHECKPOINT_KIND, step=at, epoch=at // steps_per_epoch,
                recipe=recipe, keep=run.keep_checkpoints, mark_best=mark_best, chief=runtime.is_chief,
                num_classes=len(classes), classes=classes, image_size=image_size, best=best,
            )  # fmt: skip
            saved_at[0] = at

    # run_stop's status: the run's target, else MLPerf's (top-1 in %)
    quality_target = (
        run.target.value if run.target.value is not None else 100 * CLOSED_TARGETS[MLPERF_BENCHMARK]
    )
    val_top1, reached = None, False
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=runtime.is_chief, total_steps=last_step, desc="train"
    )
    summary = {"global_batch": global_batch, "steps": step}
    mlperf.init_stop()
    mlperf.run_start()
    try:
        # an exception from here on logs run_stop "aborted"; a SIGTERM checkpoints the step and ends with 143
        with mlperf, logger, preemption(runtime) as preempted:
            while step < last_step and not reached:
                epoch = step // steps_per_epoch
                mlperf.epoch_start(epoch + 1, samples=step * global_batch)
                iterator = data.train_iterator(
                    runtime, args.data_backend, info, run.batch_per_gpu, image_size, num_classes=len(classes),
                    epoch=epoch, seed=run.seed, steps=steps_per_epoch, skip_steps=step % steps_per_epoch,
                    min_crop_area=float(recipe["data"].get("min_crop_area", 0.08)),
                )  # fmt: skip
                step, reading = train_one_epoch(
                    train_step, iterator, first_step=step, steps_per_epoch=steps_per_epoch, last_step=last_step,
                    run=run, logger=logger, save=save, preemption=preempted,
                )  # fmt: skip
                mlperf.epoch_stop(epoch + 1, samples=step * global_batch)
                summary.update(steps=step, train_loss=reading["loss"], train_top1=reading["top1"])
                epochs_done = step // steps_per_epoch if step % steps_per_epoch == 0 else 0
                saving = (
                    step == last_step or run.checkpoint_every and run.checkpoint_every.due(epochs_done, step)
                )
                improved = False
                due = run.eval_every is not None and run.eval_every.due(epochs_done, step)
                if info is not None and not args.no_eval and (due or step == last_step):
                    mlperf.eval_start(epoch + 1, samples=step * global_batch)
                    batches, total = data.eval_batches(runtime, info, run.batch_per_gpu, image_size)
                    metrics = evaluate(
                        train_step, batches, total=total, chief=runtime.is_chief, source=info.data_dir
                    )
                    mlperf.eval_stop(epoch + 1, samples=step * global_batch)
                    mlperf.eval_accuracy(metrics["top1"] / 100, epoch + 1, samples=step * global_batch)
                    logger.log(step, metrics, phase="eval")
                    summary.update(val_top1=metrics["top1"], val_top5=metrics["top5"])
                    val_top1 = metrics["top1"]
                    reached = run.target.reached(val_top1)
                    improved = improves("top1", val_top1, best.get("top1"))
                    best = {"top1": val_top1, "step": step} if improved else best
                    if reached:
                        print(f"reached target top-1 {run.target.value}% at step {step}", file=sys.stderr)
                if saving or reached or improved:  # after the evaluation: its checkpoint knows the best
                    save(step, mark_best=improved)
            success = val_top1 is not None and val_top1 >= quality_target
            mlperf.run_stop("success" if success else "aborted")
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        if "IteratorGetNext" not in str(e):  # not the input pipeline's
            raise
        raise UserError(
            f"a bad record in {info.data_dir if info else 'the input'} at step {step + 1} "
            f"({first_line(e)}): scripts/download_data.sh --verify --data-dir "
            f"{info.data_dir if info else 'DIR'} names the shard and record"
        ) from None
    if args.dump_weights:  # lets a multi-worker run be checked: every worker must hold the same weights
        import numpy as np

        with atomic_write(args.dump_weights.format(worker=runtime.worker_index)) as tmp, open(tmp, "wb") as f:
            np.savez(f, **{v.path: v.numpy() for v in model.variables})
    return summary


if __name__ == "__main__":
    main()
