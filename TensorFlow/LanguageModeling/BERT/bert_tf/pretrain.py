"""BERT pretraining in TensorFlow 2 / Keras (phase 1 at 128 tokens, phase 2 at 512): LAMB with warm-up and
polynomial decay, gradient accumulation, mixed_bfloat16 / mixed_float16 (dynamic loss scaling), XLA,
tf.distribute (MultiWorkerMirroredStrategy over nodes, MirroredStrategy over a node's GPUs; Horovod
where the container ships it), exact resume, masked-LM accuracy against a target, MLPerf events.

    python -m bert_tf.pretrain --recipe configs/pretrain_phase1_8gpu.yaml --data-dir data/bert/phase1

The run directory holds ``run.json`` (model, config, task), ``checkpoints/`` (tf.train.Checkpoint of
model, optimizer and step, every ``checkpoint_every`` steps and at the end), ``model.npz`` (the final
weights under Google's variable names: what ``--init-checkpoint`` of SQuAD fine-tuning and the
PyTorch BERT's ``bert.convert`` read), ``metrics.jsonl``, ``tensorboard/`` and ``mlperf.log``
(benchmark "bert"; a resumed run writes ``mlperf-resumed-from-ckpt-N.log``).

Exact resume: micro-batch k of the run is a function of k (``bert_tf.data``), and the dropout
generators' states are part of the checkpoint, so a run continued with ``--resume auto`` goes on as
the unbroken run would have.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

from zoo.cli import add_run_args, add_target_arg, entry_point, recipe_from_args, resolve_resume
from zoo.cli import parse_args as parse_shared_args
from zoo.errors import one_line

MODEL_DIR = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "pretrain_phase1_1gpu.yaml"
PRECISIONS = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
MLPERF_BENCHMARK = "bert"
# flag -> recipe key; a flag left unset keeps the recipe's value (zoo.cli maps --amp to amp)
FLAG_KEYS = {
    "model": "model",
    "steps": "steps",
    "batch_size": "batch_size",
    "accumulation": "accumulation",
    "lr": "optimizer.lr",
    "warmup": "schedule.warmup",
    "seed": "seed",
    "xla": "xla",
    "checkpoint_every": "checkpoint_every",
    "log_every": "log_every",
    "eval_every": "eval_every",
    "eval_samples": "eval_samples",
    "max_seq": "max_seq",
    "target_mlm_accuracy": "target_mlm_accuracy",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="train.sh",
        description="BERT pretraining (TensorFlow 2 / Keras) from a recipe; flags override the recipe.",
    )
    add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_help="prepared samples: shards + metadata.json (scripts/download_data.sh prepare; $DATA_DIR)",
    )
    add_target_arg(p, "mlm_accuracy", unit="fraction of masked tokens, MLPerf's unit", example=0.720)
    p.add_argument("--synthetic", action="store_true", help="random full-length samples, no data needed")
    p.add_argument("--eval-data-dir", help="samples for the MLM accuracy (default: --data-dir)")
    p.add_argument("--init-checkpoint", help="start from these weights (Google ckpt/zip, .npz, a run dir)")
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny")
    p.add_argument("--steps", type=int, help="optimizer steps of the whole run (the schedule's length)")
    p.add_argument("--stop-after", type=int, help="stop this process after N steps (schedule unchanged)")
    p.add_argument("--batch-size", type=int, help="micro-batch per replica")
    p.add_argument("--accumulation", type=int, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup", type=float, help="warm-up: fraction of steps (<1) or a step count")
    p.add_argument("--seed", type=int)
    p.add_argument("--xla", action="store_const", const=True, help="compile forward+backward with XLA")
    p.add_argument("--max-seq", type=int, help="synthetic data only (prepared data brings its own)")
    p.add_argument("--vocab-size", type=int, default=30522, help="synthetic data only")
    p.add_argument("--checkpoint-every", type=int)
    p.add_argument("--log-every", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--eval-samples", type=int)
    p.add_argument("--distribution", default="auto", help="auto, default, mirrored, multiworker or horovod")
    p.add_argument(
        "--dump-weights", metavar="PATH", help="every worker writes its weights to PATH ({worker})"
    )
    args = parse_shared_args(p, argv)
    if not args.synthetic and not args.data_dir:
        p.error("--data-dir (or $DATA_DIR) is required unless --synthetic")
    return args


def checkpoint_prefix(resume: str | None, results_dir: Path) -> str | None:
    """The checkpoint prefix this run continues from (``--resume {auto,PATH,none}``), or None."""
    import tensorflow as tf

    if resume not in (None, "auto", "none") and Path(resume + ".index").is_file():
        return resume
    found = resolve_resume(resume, results_dir / "checkpoints" / "checkpoint")
    if found is None:
        return None
    folder = found.parent if found.name == "checkpoint" else found
    folder = folder / "checkpoints" if (folder / "checkpoints").is_dir() else folder
    latest = tf.train.latest_checkpoint(str(folder))
    if latest is None:
        raise SystemExit(f"error: --resume {resume}: {folder} holds no checkpoint")
    return latest


def mlperf_log_path(results_dir: Path, resume_from: str | None) -> Path:
    """mlperf.log for a new run; a resumed run gets its own file (the checker reads one run per file)."""
    if resume_from is None:
        return results_dir / "mlperf.log"
    return results_dir / f"mlperf-resumed-from-{Path(resume_from).name}.log"


def log_mlperf_recipe(mlperf, recipe: dict, global_batch: int, train_samples: int, eval_samples: int) -> None:
    """The sizes and hyper-parameters MLPerf's BERT rules ask for, from this run's recipe."""
    opt = recipe["optimizer"]
    warmup = recipe["schedule"]["warmup"]
    warmup_steps = int(warmup * recipe["steps"] if warmup < 1 else warmup)
    beta_1, beta_2 = opt.get("betas", (0.9, 0.999))
    mlperf.seed(recipe["seed"])
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(recipe["accumulation"])
    mlperf.train_samples(train_samples)
    mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name="lamb",
        opt_base_learning_rate=opt["lr"],
        opt_lamb_epsilon=opt.get("eps", 1e-6),
        opt_lamb_beta_1=beta_1,
        opt_lamb_beta_2=beta_2,
        opt_lamb_weight_decay_rate=opt["weight_decay"],
        opt_learning_rate_training_steps=recipe["steps"],
        opt_learning_rate_warmup_steps=warmup_steps,
        num_warmup_steps=warmup_steps,
        start_warmup_step=0,
        max_sequence_length=recipe["max_seq"],
    )


def build_train_step(runtime, model, optimizer, *, accumulation: int, nsp: bool, xla: bool):
    """``train_step(distributed stacked micro-batches) -> [mlm loss sum, correct, targets, nsp loss sum,
    nsp labels]`` over the whole global batch (``step_losses`` turns it into mean losses).

    The loss is the mean over every masked token of the global batch (and, with NSP, plus the mean over
    its sequence pairs): each replica divides its sums by the global counts (one small all-reduce), so N
    replicas x B samples train exactly as one process on N x B. Gradients of the ``accumulation``
    micro-batches are summed in fp32 inside one (optionally XLA) function, then one LAMB update;
    tf.distribute all-reduces them (a sum) in ``optimizer.apply``.
    """
    import keras
    import tensorflow as tf

    from bert_tf.model import mlm_loss_and_accuracy, nsp_loss_sum

    strategy, hvd = runtime.strategy, runtime.hvd
    variables = model.trainable_variables
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def micro_step(batch, totals):
        with tf.GradientTape() as tape:
            out = model(batch, training=True)
            mlm_sum, correct, count = mlm_loss_and_accuracy(out["mlm_logits"], batch["mlm_labels"])
            objective = mlm_sum / tf.maximum(totals[0], 1.0)
            nsp_sum = nsp_count = tf.constant(0.0)
            if nsp:
                nsp_sum, nsp_count = nsp_loss_sum(out["nsp_logits"], batch["nsp_labels"])
                objective = objective + nsp_sum / tf.maximum(totals[1], 1.0)
            if scaled:
                objective = optimizer.scale_loss(objective)
        grads = [tf.cast(tf.convert_to_tensor(g), tf.float32) for g in tape.gradient(objective, variables)]
        return grads, tf.stack([mlm_sum, correct, count, nsp_sum, nsp_count])

    def gradients(batches, totals):
        grads, stats = micro_step({k: v[0] for k, v in batches.items()}, totals)
        for i in tf.range(1, accumulation):
            more, more_stats = micro_step({k: v[i] for k, v in batches.items()}, totals)
            grads = [a + b for a, b in zip(grads, more, strict=True)]
            stats = stats + more_stats
        return grads, stats

    if xla:
        gradients = tf.function(gradients, jit_compile=True)

    def replica_step(batches):
        local = [tf.reduce_sum(tf.cast(batches["mlm_labels"] >= 0, tf.float32))]
        local.append(
            tf.reduce_sum(tf.cast(batches["nsp_labels"] >= 0, tf.float32)) if nsp else tf.constant(0.0)
        )
        local = tf.stack(local)
        totals = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)
        if hvd is not None:
            totals = hvd.allreduce(totals, op=hvd.Sum)
        grads, stats = gradients(batches, totals)
        if hvd is not None:
            grads = [hvd.allreduce(g, op=hvd.Sum) for g in grads]
        optimizer.apply(grads, variables)
        return stats

    @tf.function
    def train_step(batches):
        stats = strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(batches,)), axis=None
        )
        return hvd.allreduce(stats, op=hvd.Sum) if hvd is not None else stats

    return train_step


def step_losses(stats) -> dict:
    """{"loss", "mlm_loss", "train_mlm_accuracy"} of ``train_step`` sums (one step's, or a window's)."""
    mlm = float(stats[0]) / max(float(stats[2]), 1.0)
    nsp = float(stats[3]) / float(stats[4]) if stats[4] > 0 else 0.0
    return {
        "loss": mlm + nsp,
        "mlm_loss": mlm,
        "train_mlm_accuracy": float(stats[1]) / max(float(stats[2]), 1.0),
    }


def build_eval_step(model):
    """``eval_step(batch) -> [correct, targets]`` of the masked LM on one batch (one device)."""
    import tensorflow as tf

    from bert_tf.model import mlm_loss_and_accuracy

    @tf.function
    def eval_step(batch):
        out = model(batch, training=False)
        _, correct, count = mlm_loss_and_accuracy(out["mlm_logits"], batch["mlm_labels"])
        return tf.stack([correct, count])

    return eval_step


def mlm_accuracy(eval_step, batches) -> float:
    """Masked-LM accuracy (MLPerf BERT's metric): correct predictions / masked tokens. Every worker
    evaluates the same batches (no collectives), so every worker takes the same stop decision."""
    import numpy as np

    totals = np.zeros(2)
    for batch in batches:
        totals += eval_step(batch).numpy()
    return float(totals[0] / max(totals[1], 1.0))


def _checkpoint_manager(runtime, checkpoint, results_dir: Path):
    """Every worker writes (a save may run collectives); only the chief's copy is kept."""
    import tensorflow as tf

    directory = results_dir / "checkpoints"
    if not runtime.is_chief:
        directory = results_dir / f".worker{runtime.worker_index}_checkpoints"
    return tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=3)


def _save(runtime, manager, step: int) -> None:
    manager.save(checkpoint_number=step)
    if not runtime.is_chief:
        shutil.rmtree(manager.directory, ignore_errors=True)


def settings_from(recipe: dict) -> dict:
    """The recipe's run settings, range-checked (a one-line error for a bad value)."""
    for key in ("steps", "batch_size", "accumulation", "eval_every", "checkpoint_every", "log_every"):
        if int(recipe[key]) < 1:
            raise SystemExit(f"error: {key} must be a positive integer, not {recipe[key]}")
    if recipe.get("amp", "fp32") not in PRECISIONS:
        raise SystemExit(f"error: recipe amp {recipe['amp']!r} is not one of {', '.join(PRECISIONS)}")
    target = recipe.get("target_mlm_accuracy")
    if target is not None and not 0 < float(target) <= 1:
        raise SystemExit(f"error: --target-mlm-accuracy is a fraction (MLPerf: 0.720), not {target}")
    return recipe


@entry_point
def main(argv=None) -> dict:
    args = parse_args(argv)
    recipe = settings_from(recipe_from_args(args, FLAG_KEYS))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.tf import make_runtime

    runtime = make_runtime(args.distribution)  # before any other TensorFlow op

    import keras
    import numpy as np
    import tensorflow as tf
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger

    from bert_tf import data as bert_data
    from bert_tf.checkpoint import (
        export_google_npz,
        find_run_checkpoint,
        load_google,
        load_weights,
        named_weights,
        read_weights,
    )
    from bert_tf.lamb import build_optimizer
    from bert_tf.model import bert_config, build_pretrainer, dropout_states, parameter_count

    keras.utils.set_random_seed(recipe["seed"])
    keras.mixed_precision.set_global_policy(PRECISIONS[recipe["amp"]])
    results_dir = Path(args.results_dir)
    resume_from = checkpoint_prefix(args.resume, results_dir)

    replicas = runtime.num_replicas
    batch_size, accumulation = int(recipe["batch_size"]), int(recipe["accumulation"])
    if args.synthetic:
        nsp, vocab_size, max_seq = False, args.vocab_size, int(recipe["max_seq"])
        sources = [
            bert_data.SyntheticMicroBatches(
                batch_size, max_seq, int(recipe["max_predictions"]), vocab_size, seed=recipe["seed"] + r
            )
            for r in range(replicas)
        ]
        train_samples, eval_sets = recipe["steps"] * batch_size * accumulation * replicas, []
    else:
        data = bert_data.open_pretraining_data(args.data_dir, seed=recipe["seed"])
        nsp, vocab_size, max_seq = data.spec.nsp, data.specials.vocab_size, data.spec.max_seq
        sources = [
            bert_data.MicroBatches(data, batch_size, rank=r, world_size=replicas) for r in range(replicas)
        ]
        eval_data = (
            bert_data.open_pretraining_data(args.eval_data_dir, seed=0) if args.eval_data_dir else data
        )
        eval_sets = bert_data.eval_batches(eval_data, int(recipe["eval_samples"]), batch_size)
        train_samples = len(data)
    recipe["max_seq"] = max_seq
    # the start weights are read before anything is written: a bad --init-checkpoint leaves no trace
    init_weights = None
    if args.init_checkpoint and not resume_from and find_run_checkpoint(args.init_checkpoint) is None:
        init_weights = read_weights(args.init_checkpoint)
    results_dir.mkdir(parents=True, exist_ok=True)
    global_batch = batch_size * accumulation * replicas
    dropout = float(recipe.get("dropout", 0.1))
    config = bert_config(
        recipe["model"], vocab_size=vocab_size, max_position_embeddings=max(512, max_seq),
        hidden_dropout=dropout, attention_dropout=dropout,
    )  # fmt: skip

    mlperf_path = mlperf_log_path(results_dir, resume_from)
    if runtime.is_chief:
        mlperf_path.unlink(missing_ok=True)  # the logger appends; this run's file holds this run only
    mlperf = MLPerfLogger(mlperf_path, MLPERF_BENCHMARK, enabled=runtime.is_chief)
    mlperf.cache_clear(False)  # the page cache is not dropped (that needs root)
    mlperf.init_start()
    log_mlperf_recipe(
        mlperf, recipe, global_batch, train_samples, sum(len(b["input_ids"]) for b in eval_sets)
    )

    with runtime.strategy.scope():
        model = build_pretrainer(config, nsp=nsp)
        optimizer = build_optimizer(recipe, recipe["amp"])
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(
        weights=named_weights(model),
        optimizer=optimizer,
        global_step=global_step,
        dropout=dropout_states(model),
    )
    manager = _checkpoint_manager(runtime, checkpoint, results_dir)
    if resume_from:
        try:
            checkpoint.restore(resume_from).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise SystemExit(
                f"error: cannot resume from {resume_from} (another model, --amp or optimizer?): "
                f"{one_line(e, limit=200)}; use --resume none or another --results-dir"
            ) from None
    elif init_weights is not None:
        load_google(model, init_weights)
    elif args.init_checkpoint:
        load_weights(model, args.init_checkpoint)

    if runtime.is_chief:
        info = {"task": "pretraining", "model": recipe["model"], "config": config.__dict__, "nsp": nsp}
        info.update(amp=recipe["amp"], recipe=recipe, global_batch=global_batch, replicas=replicas)
        info.update(workers=runtime.num_workers, distribution=runtime.kind)
        tmp = results_dir / "run.json.tmp"
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, results_dir / "run.json")

    train_step = build_train_step(
        runtime, model, optimizer, accumulation=accumulation, nsp=nsp, xla=bool(recipe.get("xla", False))
    )
    eval_step = build_eval_step(model)
    total_steps = int(recipe["steps"])
    step = int(global_step.numpy())
    steps_end = total_steps if args.stop_after is None else min(total_steps, step + args.stop_after)
    target = recipe.get("target_mlm_accuracy")
    eval_every, log_every = int(recipe["eval_every"]), int(recipe["log_every"])

    horovod_rank = runtime.worker_index if runtime.hvd is not None else 0  # one replica per Horovod process

    def distributed_batches(first_micro: int):
        def per_replica(ctx):
            return {
                k: tf.constant(v)
                for k, v in bert_data.stacked(
                    sources[ctx.replica_id_in_sync_group + horovod_rank], first_micro, accumulation
                ).items()
            }

        return runtime.strategy.experimental_distribute_values_from_function(per_replica)

    if runtime.is_chief:
        print(
            f"{recipe['model']} ({parameter_count(model) / 1e6:.1f}M parameters), seq {max_seq}, global batch "
            f"{global_batch} = {batch_size} x {accumulation} accumulation x {replicas} replicas, {recipe['amp']}"
            f"{', XLA' if recipe.get('xla') else ''}, steps {step}..{steps_end} of {total_steps} ({runtime.kind})",
            file=sys.stderr,
        )
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=runtime.is_chief, total_steps=steps_end, desc="pretrain"
    )
    summary = {"global_batch": global_batch, "steps": step, "losses": []}
    reached, accuracy = False, None
    window = np.zeros(5)
    window_steps, window_start = 0, time.perf_counter()
    mlperf.init_stop()
    mlperf.run_start()
    block_first = step * global_batch
    mlperf.block_start(block_first, min(eval_every, max(steps_end - step, 1)) * global_batch)
    block_open = True
    with mlperf, logger:  # an exception from here on logs run_stop "aborted"
        while step < steps_end:
            stats = train_step(distributed_batches(step * accumulation)).numpy()
            step += 1
            global_step.assign(step)
            loss = step_losses(stats)["loss"]
            if not math.isfinite(loss):
                raise SystemExit(f"error: loss is {loss} at step {step}: lower the learning rate or use bf16")
            summary["losses"].append(loss)
            window += stats
            window_steps += 1
            logger.progress(step, items=global_batch, metrics={"loss": loss})
            last = step == steps_end
            if step % log_every == 0 or last:
                elapsed = time.perf_counter() - window_start
                logger.log(
                    step,
                    {
                        **step_losses(window),
                        "lr": float(optimizer.learning_rate),
                        "sequences_per_s": window_steps * global_batch / max(elapsed, 1e-9),
                    },
                    units={"sequences_per_s": "seq/s"},
                )
                window[:], window_steps, window_start = 0, 0, time.perf_counter()
            if eval_sets and (step % eval_every == 0 or last):
                eval_began = time.perf_counter()
                samples = step * global_batch
                mlperf.block_stop(block_first)
                block_open = False
                mlperf.eval_start(samples)
                accuracy = mlm_accuracy(eval_step, eval_sets)
                mlperf.eval_stop(samples)
                mlperf.eval_accuracy(accuracy, samples)
                logger.log(step, {"mlm_accuracy": accuracy}, phase="eval")
                reached = target is not None and accuracy >= float(target)
                if reached and runtime.is_chief:
                    print(f"reached target MLM accuracy {target} at step {step}", file=sys.stderr)
                last = last or reached
                if not last:
                    block_first = samples
                    mlperf.block_start(block_first, min(eval_every, steps_end - step) * global_batch)
                    block_open = True
                window_start += time.perf_counter() - eval_began  # evaluation is not training time
            if step % int(recipe["checkpoint_every"]) == 0 or last:
                _save(runtime, manager, step)
            if last:
                break
        if block_open:
            mlperf.block_stop(block_first)
        finished = step == total_steps and target is None
        mlperf.run_stop("success" if reached or finished else "aborted")
    if runtime.is_chief:
        export_google_npz(model, results_dir / "model.npz")
    summary.update(steps=step, mlm_accuracy=accuracy, reached_target=reached)
    if args.dump_weights:  # lets a multi-worker run be checked: every worker must hold the same weights
        np.savez(
            args.dump_weights.format(worker=runtime.worker_index),
            **{v.path: v.numpy() for v in model.variables},
        )
    return summary


if __name__ == "__main__":
    main()
