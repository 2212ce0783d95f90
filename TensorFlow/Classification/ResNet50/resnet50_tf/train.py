"""Train ResNet-50 v1.5 with a recipe: tf.distribute (or Horovod), mixed precision, XLA, exact resume.

    python -m resnet50_tf.train --recipe configs/resnet50_1gpu_90ep.yaml --data-dir /data/tfrecords \
        --results-dir results/run1 --amp bf16

The run directory holds `run.json` (model and data description), `checkpoints/` (tf.train.Checkpoint
of model, optimizer, loss scale and global step, written every epoch and every --checkpoint-steps),
`metrics.jsonl`, and `mlperf.log` (the MLPerf training event sequence, benchmark "resnet", checked by
zoo.mlperf.check_log; a resumed run writes its own `mlperf-resumed-from-ckpt-<step>.log`). `--resume auto` continues from the newest checkpoint; the resumed run sees the
same batches and ends with the same weights as an unbroken one. Without `--resume`, a results dir
that already holds a checkpoint is an error (nothing is overwritten unasked).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from zoo.cli import add_run_args, add_target_arg, entry_point, recipe_from_args, resolve_resume
from zoo.cli import parse_args as parse_shared_args
from zoo.errors import one_line
from zoo.io import atomic_write, remove_stale_temps

MODEL_DIR = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "resnet50_1gpu_90ep.yaml"
DATA_HELP = "TFRecord folder: dataset.json + train-*/validation-* shards ($DATA_DIR)"
# --amp values -> Keras dtype policies
PRECISIONS = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
DATA_BACKENDS = ("tfdata", "dali", "synthetic")
MLPERF_BENCHMARK = "resnet"
# Flags that override a recipe key (a flag given as 0 reaches the range checks, it is not dropped).
FLAG_TO_RECIPE = {
    "batch_size": "batch_size_per_gpu",
    "epochs": "epochs",
    "image_size": "data.image_size",
    "target_top1": "target_top1",
}


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
    p.add_argument("--batch-size", type=int, help="per-replica batch (default: the recipe's)")
    p.add_argument("--epochs", type=int, help="default: the recipe's")
    p.add_argument("--steps-per-epoch", type=int, help="default: train images // global batch")
    p.add_argument("--max-steps", type=int, help="stop after this many global steps (schedule unchanged)")
    p.add_argument("--image-size", type=int, help="default: the recipe's")
    p.add_argument("--num-classes", type=int, help="synthetic data only (TFRecords bring their classes)")
    p.add_argument(
        "--checkpoint-steps", type=int, default=0, help="also checkpoint every N steps (0: per epoch)"
    )
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--init-checkpoint", help="start from these weights (a run dir, checkpoint or .h5)")
    p.add_argument("--no-eval", action="store_true", help="skip validation after each epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--deterministic", action="store_true", help="deterministic kernels (bit-exact reruns; slower on GPU)"
    )
    p.add_argument("--log-every", type=int, default=20, help="steps between metrics lines")
    p.add_argument(
        "--dump-weights",
        metavar="PATH",
        help="at the end, every worker writes its weights to PATH ({worker} = index)",
    )
    args = parse_shared_args(p, argv)
    for flag in ("steps_per_epoch", "max_steps", "num_classes", "keep_checkpoints", "log_every"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SystemExit(f"error: --{flag.replace('_', '-')} must be a positive integer, not {value}")
    if args.checkpoint_steps < 0:
        raise SystemExit(f"error: --checkpoint-steps must be >= 0, not {args.checkpoint_steps}")
    if args.synthetic:
        args.data_backend = "synthetic"
    if args.deterministic and args.xla:
        p.error("--deterministic and --xla cannot be combined: XLA has no deterministic max-pool gradient")
    if args.data_backend != "synthetic" and not args.data_dir:
        p.error("--data-dir (or $DATA_DIR) is required unless --synthetic")
    return args


def set_precision(precision: str) -> None:
    import keras

    keras.mixed_precision.set_global_policy(PRECISIONS[precision])


def _settings(recipe: dict) -> dict:
    """The recipe's run settings (flags already applied by recipe_from_args), range-checked."""
    data = recipe.get("data", {})
    target = recipe.get("target_top1")
    s = {
        "amp": recipe.get("amp", "fp32"),
        "batch_size": int(recipe["batch_size_per_gpu"]),
        "epochs": int(recipe["epochs"]),
        "image_size": int(data.get("image_size", 224)),
        "target_top1": None if target is None else float(target),
        "label_smoothing": float(recipe.get("label_smoothing", 0.0)),
        "zero_init_residual": bool(recipe.get("zero_init_residual", False)),
        "min_crop_area": float(data.get("min_crop_area", 0.08)),
    }
    if s["amp"] not in PRECISIONS:
        raise SystemExit(f"error: recipe amp {s['amp']!r} is not one of {', '.join(PRECISIONS)}")
    if s["batch_size"] < 1:  # zoo.recipe range-checks epochs and image_size; this key is ours
        raise SystemExit(f"error: batch_size_per_gpu must be a positive integer, not {s['batch_size']}")
    return s


def resume_checkpoint(resume: str | None, results_dir: Path) -> str | None:
    """The checkpoint prefix a run continues from (``--resume {auto,PATH,none}``), or None for a new run.

    PATH is a run directory, its checkpoints/ directory or a checkpoint prefix (``.../ckpt-6``).
    """
    from resnet50_tf.checkpoint import find_checkpoint

    if resume not in (None, "auto", "none") and Path(resume + ".index").is_file():
        return resume  # a prefix names files (ckpt-6.index, ckpt-6.data-*), not a path of its own
    # CheckpointManager's index file: it exists once a checkpoint has been saved
    found = resolve_resume(resume, results_dir / "checkpoints" / "checkpoint")
    if found is None:
        return None
    return find_checkpoint(found.parent if found.name == "checkpoint" else found)[0]


def remove_stale_checkpoint_parts(results_dir: Path) -> list[Path]:
    """Delete what a checkpoint write killed midway left: TensorFlow's ``<prefix>_temp/`` folders and
    zoo's ``.NAME.*.tmp`` files. Call it at start-up, before the run writes there; returns them."""
    import shutil

    folder = results_dir / "checkpoints"
    stale = remove_stale_temps(results_dir) + remove_stale_temps(folder)
    for temp in sorted(folder.glob("*_temp")) if folder.is_dir() else []:
        if temp.is_dir():
            shutil.rmtree(temp)
            stale.append(temp)
    return stale


def build_step_functions(runtime, model, optimizer, global_batch: int, label_smoothing: float, xla: bool):
    """(train_step, eval_step): tf.functions that take a distributed iterator / batch."""
    import keras
    import numpy as np
    import tensorflow as tf

    strategy, hvd = runtime.strategy, runtime.hvd
    num_classes = model.output.shape[-1]
    top_k = min(5, num_classes)
    loss_fn = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=label_smoothing, reduction=None
    )
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def forward_backward(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = loss_fn(tf.one_hot(labels, num_classes), logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled_loss = optimizer.scale_loss(loss) if scaled else loss
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        correct = tf.reduce_sum(
            tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
        )
        return grads, loss, correct

    if xla:
        forward_backward = tf.function(forward_backward, jit_compile=True)

    def replica_step(images, labels):
        grads, loss, correct = forward_backward(images, labels)
        if hvd is not None:
            grads = [hvd.allreduce(g, op=hvd.Sum) for g in grads]
        optimizer.apply(grads, model.trainable_variables)
        return loss, correct

    statistics = list(model.non_trainable_variables)  # batch-norm moving means and variances

    def average_statistics():
        """Replicas see different batches, so their moving statistics drift apart: average them (one small
        all-reduce per step) so every replica and worker holds, saves and evaluates the same model."""
        flat = strategy.run(lambda: tf.concat([tf.reshape(tf.identity(v), [-1]) for v in statistics], 0))
        flat = strategy.reduce(tf.distribute.ReduceOp.MEAN, flat, axis=None)
        start = 0
        for v in statistics:
            size = int(np.prod(v.shape))
            v.assign(tf.reshape(flat[start : start + size], v.shape))
            start += size

    @tf.function
    def train_step(iterator):
        loss, correct = strategy.run(replica_step, args=next(iterator))
        if strategy.num_replicas_in_sync > 1:
            average_statistics()
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
        correct = strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None)
        if hvd is not None:
            loss = hvd.allreduce(loss, op=hvd.Sum)
            correct = hvd.allreduce(correct, op=hvd.Sum)
        return loss, correct / global_batch

    def replica_eval(images, labels):
        logits = tf.cast(model(images, training=False), tf.float32)
        top1 = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, logits, 1), tf.float32))
        topk = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, logits, top_k), tf.float32))
        count = tf.cast(tf.shape(labels)[0], tf.float32)
        return tf.stack([top1, topk, count])

    @tf.function
    def eval_step(batch):
        sums = strategy.run(replica_eval, args=batch)
        sums = strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None)
        return hvd.allreduce(sums, op=hvd.Sum) if hvd is not None else sums

    return train_step, eval_step


def evaluate_model(runtime, eval_step, info, batch_size: int, image_size: int, preprocessing=None) -> dict:
    """Top-1 / top-5 (%) over the whole validation split, summed over every replica and worker; the
    chief draws a progress line (batches done/total, images/s) on the console. ``preprocessing``: a
    registry checkpoint's (see data.eval_image)."""
    import numpy as np
    from zoo.log import MetricsLogger

    from resnet50_tf.data import build_eval_dataset

    def dataset_fn(ctx):
        if runtime.hvd is not None:
            import tensorflow as tf

            ctx = tf.distribute.InputContext(runtime.num_workers, runtime.worker_index, 1)
        return build_eval_dataset(
            info, batch_size, image_size, input_context=ctx, preprocessing=preprocessing
        )

    dist = runtime.strategy.distribute_datasets_from_function(dataset_fn)
    batches = max(1, math.ceil(info.val_examples / (batch_size * runtime.num_replicas)))
    totals = np.zeros(3)
    with MetricsLogger(None, enabled=runtime.is_chief, total_steps=batches, desc="eval") as progress:
        for done, batch in enumerate(dist, 1):
            sums = eval_step(batch).numpy()
            totals += sums
            progress.progress(done, items=int(sums[2]), metrics={"top1": 100 * totals[0] / max(totals[2], 1)})
    top1, topk, count = totals
    if count == 0:
        raise SystemExit(f"the validation split of {info.data_dir} is empty")
    return {"top1": 100 * top1 / count, "top5": 100 * topk / count, "images": int(count)}


def _checkpoint_manager(runtime, checkpoint, results_dir: Path, keep: int):
    """Every worker writes (collectives may run during save); only the chief's copy is kept."""
    import tensorflow as tf

    directory = results_dir / "checkpoints"
    if not runtime.is_chief:
        directory = results_dir / f".worker{runtime.worker_index}_checkpoints"
    return tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=keep)


def _save(runtime, manager, step: int) -> None:
    import shutil

    manager.save(checkpoint_number=step)
    if not runtime.is_chief:
        shutil.rmtree(manager.directory, ignore_errors=True)


def mlperf_log_path(results_dir: Path, resume_from: str | None) -> Path:
    """mlperf.log for a new run; a resumed run gets a file of its own (the checker reads one run per file)."""
    if resume_from is None:
        return results_dir / "mlperf.log"
    return results_dir / f"mlperf-resumed-from-{Path(resume_from).name}.log"


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


@entry_point
def main(argv=None) -> dict:
    args = parse_args(argv)
    recipe = recipe_from_args(args, FLAG_TO_RECIPE)
    settings = _settings(recipe)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from zoo.tf import make_runtime

    runtime = make_runtime(args.distribution)  # before any other TF op

    import keras
    import tensorflow as tf
    from zoo.log import MetricsLogger
    from zoo.mlperf import CLOSED_TARGETS, MLPerfLogger

    from resnet50_tf import data
    from resnet50_tf.checkpoint import check_checkpoint, restore_weights
    from resnet50_tf.model import resnet50
    from resnet50_tf.optim import build_optimizer
    from resnet50_tf.tfrecords import check_dataset, first_line

    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    set_precision(settings["amp"])
    results_dir = Path(args.results_dir)
    resume_from = resume_checkpoint(args.resume, results_dir)

    # Everything the run reads is checked before it writes anything: the data, the checkpoint.
    info = None
    if args.data_backend == "synthetic":
        classes = [str(i) for i in range(args.num_classes or 1000)]
    else:
        info = data.read_dataset_info(args.data_dir)
        check_dataset(info, ["train"] if args.no_eval else ["train", "val"])
        classes = info.classes
        if args.num_classes is not None and args.num_classes != len(classes):
            raise SystemExit(
                f"error: --num-classes {args.num_classes}, but {info.data_dir / 'dataset.json'} lists "
                f"{len(classes)} classes (TFRecords bring their classes: leave --num-classes out)"
            )
    if resume_from or args.init_checkpoint:
        check_checkpoint(resume_from or args.init_checkpoint, len(classes))
    results_dir.mkdir(parents=True, exist_ok=True)
    if runtime.is_chief:
        remove_stale_checkpoint_parts(results_dir)
    replicas = runtime.num_replicas
    batch = settings["batch_size"]
    global_batch = batch * replicas
    if args.steps_per_epoch:
        steps_per_epoch = args.steps_per_epoch
    elif info is not None:
        steps_per_epoch = info.train_examples // global_batch
        if steps_per_epoch < 1:
            raise SystemExit(
                f"{info.train_examples} training images are fewer than one global batch of {global_batch}"
            )
    else:
        steps_per_epoch = 100
    total_steps = settings["epochs"] * steps_per_epoch
    last_step = min(total_steps, args.max_steps) if args.max_steps else total_steps

    mlperf_path = mlperf_log_path(results_dir, resume_from)
    if runtime.is_chief:
        mlperf_path.unlink(missing_ok=True)  # the logger appends; this run's file holds this run only
    mlperf = MLPerfLogger(mlperf_path, MLPERF_BENCHMARK, enabled=runtime.is_chief)
    mlperf.cache_clear(False)  # the page cache is not dropped (that needs root)
    mlperf.init_start()
    mlperf.seed(args.seed)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(1)
    mlperf.train_samples(info.train_examples if info else steps_per_epoch * global_batch)
    mlperf.eval_samples(info.val_examples if info else 0)
    mlperf.hyperparameters(**mlperf_hyperparameters(recipe, global_batch, batch))

    with runtime.strategy.scope():
        model = resnet50(
            len(classes), image_size=settings["image_size"], zero_init_residual=settings["zero_init_residual"]
        )
        optimizer = build_optimizer(recipe, steps_per_epoch, global_batch, settings["amp"])
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step)
    manager = _checkpoint_manager(runtime, checkpoint, results_dir, args.keep_checkpoints)
    if resume_from:
        try:
            checkpoint.restore(resume_from).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise SystemExit(
                f"error: cannot resume from {resume_from} (another model, --amp or optimizer?): "
                f"{one_line(e, limit=200)}; use --resume none or another --results-dir"
            ) from None
    elif args.init_checkpoint:
        restore_weights(model, args.init_checkpoint)

    run_info = {
        "model": "resnet50_v1_5",
        "num_classes": len(classes),
        "classes": classes,
        "image_size": settings["image_size"],
        "amp": settings["amp"],
        "recipe": recipe,
        "global_batch": global_batch,
        "replicas": replicas,
        "workers": runtime.num_workers,
        "distribution": runtime.kind,
    }
    if runtime.is_chief:
        with atomic_write(results_dir / "run.json") as tmp:
            tmp.write_text(json.dumps(run_info, indent=1))

    train_step, eval_step = build_step_functions(
        runtime, model, optimizer, global_batch, settings["label_smoothing"], args.xla
    )

    def train_iterator(epoch: int, skip: int):
        if args.data_backend == "synthetic":
            fn = lambda ctx: data.build_synthetic_dataset(  # noqa: E731
                batch, settings["image_size"], len(classes), steps_per_epoch - skip, seed=args.seed
            )
        elif args.data_backend == "dali":
            from resnet50_tf.dali import build_dali_train_dataset

            fn = lambda ctx: build_dali_train_dataset(  # noqa: E731
                info, batch, settings["image_size"], epoch=epoch, seed=args.seed, input_context=ctx
            )
        else:

            def fn(ctx):
                if runtime.hvd is not None:
                    ctx = tf.distribute.InputContext(runtime.num_workers, runtime.worker_index, 1)
                return data.build_train_dataset(
                    info,
                    batch,
                    settings["image_size"],
                    epoch=epoch,
                    seed=args.seed,
                    steps=steps_per_epoch,
                    skip_steps=skip,
                    input_context=ctx,
                    min_crop_area=settings["min_crop_area"],
                )

        return iter(runtime.strategy.distribute_datasets_from_function(fn))

    # run_stop's status: the run's target, else MLPerf's (top-1 in %)
    quality_target = settings["target_top1"]
    if quality_target is None:
        quality_target = 100 * CLOSED_TARGETS[MLPERF_BENCHMARK]
    val_top1 = None
    step = int(global_step.numpy())
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=runtime.is_chief, total_steps=last_step, desc="train"
    )
    if step:
        print(f"resumed from {resume_from} at step {step}", file=sys.stderr)
    summary = {"global_batch": global_batch, "steps": step}
    broadcast_done = runtime.hvd is None
    stop = step >= last_step
    mlperf.init_stop()
    mlperf.run_start()
    try:
        with mlperf, logger:  # an exception from here on logs run_stop "aborted"
            while not stop:
                epoch, skip = divmod(step, steps_per_epoch)
                mlperf.epoch_start(epoch + 1, samples=step * global_batch)
                iterator = train_iterator(epoch, skip)
                window_loss, window_acc, window_n, t0 = 0.0, 0.0, 0, time.perf_counter()
                for _ in range(skip, steps_per_epoch):
                    loss, acc = train_step(iterator)
                    if not broadcast_done:  # Horovod: make every rank start from rank 0's variables
                        runtime.hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=0)
                        broadcast_done = True
                    step += 1
                    global_step.assign(step)
                    loss, acc = float(loss), float(acc)
                    if not math.isfinite(loss):
                        raise SystemExit(
                            f"loss is {loss} at step {step}: lower the learning rate or use bf16"
                        )
                    window_loss, window_acc, window_n = window_loss + loss, window_acc + acc, window_n + 1
                    logger.progress(step, items=global_batch, metrics={"loss": loss})
                    if step % args.log_every == 0 or step == last_step or step % steps_per_epoch == 0:
                        elapsed = time.perf_counter() - t0
                        logger.log(
                            step,
                            {
                                "loss": window_loss / window_n,
                                "top1": 100 * window_acc / window_n,
                                "lr": float(_current_lr(optimizer)),
                                "images_per_s": window_n * global_batch / max(elapsed, 1e-9),
                            },
                            units={"top1": "%", "images_per_s": "img/s"},
                        )
                        summary.update(
                            train_loss=window_loss / window_n, train_top1=100 * window_acc / window_n
                        )
                        window_loss, window_acc, window_n, t0 = 0.0, 0.0, 0, time.perf_counter()
                    if args.checkpoint_steps and step % args.checkpoint_steps == 0:
                        _save(runtime, manager, step)
                    if step >= last_step:
                        stop = True
                        break
                mlperf.epoch_stop(epoch + 1, samples=step * global_batch)
                if step % steps_per_epoch == 0 or stop:
                    _save(runtime, manager, step)
                if info is not None and not args.no_eval and (step % steps_per_epoch == 0 or stop):
                    mlperf.eval_start(epoch + 1, samples=step * global_batch)
                    metrics = evaluate_model(runtime, eval_step, info, batch, settings["image_size"])
                    mlperf.eval_stop(epoch + 1, samples=step * global_batch)
                    mlperf.eval_accuracy(metrics["top1"] / 100, epoch + 1, samples=step * global_batch)
                    logger.log(step, metrics, units={"top1": "%", "top5": "%"}, phase="val")
                    summary.update(val_top1=metrics["top1"], val_top5=metrics["top5"])
                    val_top1 = metrics["top1"]
                    target = settings["target_top1"]
                    if target is not None and metrics["top1"] >= target:
                        print(f"reached target top-1 {target}% at step {step}", file=sys.stderr)
                        stop = True
            reached = val_top1 is not None and val_top1 >= quality_target
            mlperf.run_stop("success" if reached else "aborted")
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        if "IteratorGetNext" not in str(e):  # not the input pipeline's
            raise
        raise SystemExit(
            f"error: a bad record in {info.data_dir if info else 'the input'} at step {step + 1} "
            f"({first_line(e)}): scripts/download_data.sh --verify --data-dir "
            f"{info.data_dir if info else 'DIR'} names the shard and record"
        ) from None
    summary["steps"] = step
    if args.dump_weights:  # lets a multi-worker run be checked: every worker must hold the same weights
        import numpy as np

        path = args.dump_weights.format(worker=runtime.worker_index)
        np.savez(path, **{v.path: v.numpy() for v in model.variables})
    return summary


def _current_lr(optimizer):
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    lr = inner.learning_rate
    return lr(inner.iterations) if callable(lr) else lr


if __name__ == "__main__":
    main()
