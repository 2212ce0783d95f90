"""BERT pretraining in TensorFlow 2 / Keras (phase 1 at 128 tokens, phase 2 at 512): LAMB with warm-up and
polynomial decay, gradient accumulation, mixed_bfloat16 / mixed_float16 (dynamic loss scaling), XLA,
tf.distribute (MultiWorkerMirroredStrategy over nodes, MirroredStrategy over a node's GPUs; Horovod
where the container ships it), exact resume, masked-LM accuracy against a target, MLPerf events.

    python -m bert_tf.pretrain --recipe configs/pretrain_phase1_8gpu.yaml --data-dir data/bert/phase1

This file only wires: the step is ``bert_tf.step``'s, the loop and the evaluation ``bert_tf.engine``'s. The
run directory holds ``run.json`` (model, config, task, replicas), ``checkpoint/`` (zoo.tf's training
checkpoint: weights, LAMB, step and the dropout generators, every ``run.checkpoint_every`` and at the
end), ``model.npz`` (the final weights under Google's variable names: what ``--init-checkpoint`` of SQuAD
fine-tuning and the PyTorch BERT's ``bert.convert`` read), ``metrics.jsonl``, ``tensorboard/`` and the
MLPerf log (benchmark "bert"; zoo.mlperf.log_path names a resumed run's).

Exact resume: micro-batch k of the run is a function of k (``bert_tf.data``), and the dropout
generators' states are part of the checkpoint, so a run continued with ``--resume auto`` goes on as
the unbroken run would have. A SIGTERM (a scheduler's preemption) writes a checkpoint after the step in
progress, on every worker the same step, and ends the run with exit status 143 (zoo.cli.Preemption).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from zoo.bert import (
    PRETRAINING_RENAMED,
    MLPerfBlocks,
    log_mlperf_hyperparameters,
    pretraining_parser,
    pretraining_recipe,
    steps_to_stop,
)
from zoo.cli import entry_point, resolve_resume
from zoo.cli import parse_args as parse_shared_args
from zoo.recipe import run_config

from bert_tf.step import DEFAULT_RECIPE, PRECISIONS

MLPERF_BENCHMARK = "bert"
# this model's levers -> recipe keys (zoo.bert maps the flags both BERTs share)
FLAG_KEYS = {"xla": "xla", "eval_samples": "eval_samples"}


def parse_args(argv=None) -> argparse.Namespace:
    p = pretraining_parser(
        "train.sh",
        "BERT pretraining (TensorFlow 2 / Keras) from a recipe; flags override the recipe.",
        default_recipe=DEFAULT_RECIPE,
        data_help="prepared samples: shards + metadata.json (scripts/download_data.sh prepare; $DATA_DIR)",
    )
    p.add_argument("--xla", action="store_const", const=True, help="compile forward+backward with XLA")
    p.add_argument("--eval-samples", type=int)
    p.add_argument("--distribution", default="auto", help="auto, default, mirrored, multiworker or horovod")
    p.add_argument(
        "--dump-weights", metavar="PATH", help="every worker writes its weights to PATH ({worker})"
    )
    args = parse_shared_args(p, argv, renamed=PRETRAINING_RENAMED)
    if not args.synthetic and not args.data_dir:
        p.error("--data-dir (or $DATA_DIR) is required unless --synthetic")
    return args


def open_data(args, recipe: dict):
    """(the training data, its evaluation batches) of --data-dir and --eval-data-dir, opened and checked
    (zoo.data.bert.PretrainingData) before TensorFlow is imported; None with --synthetic."""
    if args.synthetic:
        return None
    from bert_tf import data as bert_data

    run = run_config(recipe)
    data = bert_data.open_pretraining_data(args.data_dir, seed=run.seed)
    eval_data = bert_data.open_pretraining_data(args.eval_data_dir, seed=0) if args.eval_data_dir else data
    return data, bert_data.eval_batches(eval_data, int(recipe["eval_samples"]), run.batch_per_gpu)


def build_sources(args, recipe: dict, replicas: int, opened):
    """(a micro-batch source per replica, eval batches, nsp, vocab size, max_seq, train samples);
    ``opened``: :func:`open_data`'s answer."""
    from bert_tf import data as bert_data

    run = run_config(recipe)
    batch = run.batch_per_gpu
    if opened is None:
        vocab_size, max_seq = recipe["vocab_size"], recipe["max_seq"]
        sources = [
            bert_data.SyntheticMicroBatches(batch, max_seq, recipe["max_predictions"], vocab_size, seed=run.seed + r)
            for r in range(replicas)
        ]  # fmt: skip
        return sources, [], False, vocab_size, max_seq, run.steps * batch * run.accumulation * replicas
    data, eval_sets = opened
    sources = [bert_data.MicroBatches(data, batch, rank=r, world_size=replicas) for r in range(replicas)]
    return sources, eval_sets, data.spec.nsp, data.specials.vocab_size, data.spec.max_seq, len(data)


def train(
    step, eval_step, eval_sets, *, runtime, mlperf, log, global_batch: int, end: int, save, preemption=None
):
    """The engine's loop (bert_tf.engine) up to each evaluation or checkpoint, until step ``end``
    (run.steps or --stop-after's) or the target MLM accuracy, with MLPerf's blocks and its run_stop;
    ``save()`` at each checkpoint and at the end, and after the step a SIGTERM came in (``preemption``,
    zoo.cli.Preemption: the run then ends with exit status 143). Returns (each step's loss, the last MLM
    accuracy or None, whether the target was reached)."""
    from bert_tf.engine import TrainWindow, evaluate, train_one_epoch

    def due(interval, done: int) -> bool:
        return interval is not None and interval.due(0, done)

    run = step.run
    eval_every = run.eval_every if eval_sets else None
    blocks = MLPerfBlocks(mlperf, global_batch, eval_every, end)
    window, losses, reached, accuracy = TrainWindow(), [], False, None
    while step.step_count < end and not reached:
        blocks.start(step.step_count)
        todo = steps_to_stop(step.step_count, end, eval_every, run.checkpoint_every)
        losses += train_one_epoch(
            step, todo, log=log, window=window, end=end, global_batch=global_batch, preemption=preemption,
            save=save,
        )  # fmt: skip
        done = step.step_count
        if eval_sets and (due(eval_every, done) or done == end):
            blocks.eval_start(done)
            metrics = evaluate(eval_step, eval_sets)
            accuracy = metrics["mlm_accuracy"]
            blocks.eval_stop(done, accuracy)
            log.log(done, metrics, phase="eval")
            reached = run.target.reached(accuracy)
            if reached and runtime.is_chief:
                print(f"reached target MLM accuracy {run.target.value} at step {done}", file=sys.stderr)
        if due(run.checkpoint_every, done) or done == end or reached:
            save()
    blocks.close()  # no evaluation data
    finished = step.step_count == run.steps and run.target.value is None
    mlperf.run_stop("success" if reached or finished else "aborted")
    return losses, accuracy, reached


@entry_point
def main(argv=None) -> dict:
    args = parse_args(argv)
    recipe = pretraining_recipe(args, FLAG_KEYS)
    run = run_config(recipe, args.recipe)
    from zoo.checkpoint_folder import CHECKPOINT_NAME, checkpoint_pointer, read_state

    from bert_tf.checkpoint import CHECKPOINT_OWNER, CHECKPOINT_WHAT, check_start_weights

    results_dir = Path(args.results_dir)
    resume_from = resolve_resume(args.resume, checkpoint_pointer(results_dir))
    # what needs no TensorFlow is checked before it is imported: the checkpoint's state (its variables
    # are read below, before anything is written), the start weights' kind, the data
    if resume_from is not None:
        read_state(resume_from, name=CHECKPOINT_OWNER, what=CHECKPOINT_WHAT, flag="--resume")
    elif args.init_checkpoint:
        check_start_weights(args.init_checkpoint)
    opened = open_data(args, recipe)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.tf import make_runtime

    runtime = make_runtime(args.distribution)  # before any other TensorFlow op

    import keras
    import numpy as np
    from zoo.io import atomic_write
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger, log_path
    from zoo.tf import load_training_checkpoint, preemption, save_training_checkpoint

    from bert_tf.checkpoint import (
        export_google_npz,
        find_run_checkpoint,
        load_google,
        load_weights,
        named_weights,
        read_weights,
    )
    from bert_tf.model import bert_config, build_pretrainer, dropout_states, parameter_count
    from bert_tf.step import build_eval_step, pretraining_step

    keras.utils.set_random_seed(run.seed)
    keras.mixed_precision.set_global_policy(PRECISIONS[run.precision])
    if resume_from is not None:  # a wrong file ends here, before anything is written
        load_training_checkpoint(resume_from, name=CHECKPOINT_OWNER, what=CHECKPOINT_WHAT)

    replicas = runtime.num_replicas
    sources, eval_sets, nsp, vocab_size, max_seq, train_samples = build_sources(
        args, recipe, replicas, opened
    )
    recipe["max_seq"] = max_seq
    # the start weights are read before anything is written: a bad --init-checkpoint leaves no trace
    init_weights = None
    if args.init_checkpoint and not resume_from and find_run_checkpoint(args.init_checkpoint) is None:
        init_weights = read_weights(args.init_checkpoint)
    results_dir.mkdir(parents=True, exist_ok=True)
    global_batch = run.batch_per_gpu * run.accumulation * replicas
    dropout = float(recipe["dropout"])
    config = bert_config(
        recipe["model"], vocab_size=vocab_size, max_position_embeddings=max(512, max_seq),
        hidden_dropout=dropout, attention_dropout=dropout,
    )  # fmt: skip

    # only the chief names the log: a new run's name removes the previous run's file
    mlperf_path = log_path(results_dir, resumed=resume_from is not None) if runtime.is_chief else None
    mlperf = MLPerfLogger(mlperf_path, MLPERF_BENCHMARK, enabled=runtime.is_chief)
    mlperf.cache_clear(False)  # the page cache is not dropped (that needs root)
    mlperf.init_start()
    eval_samples = sum(len(b["input_ids"]) for b in eval_sets)
    log_mlperf_hyperparameters(
        mlperf, recipe, run, max_seq=max_seq, global_batch=global_batch, train_samples=train_samples,
        eval_samples=eval_samples,
    )  # fmt: skip

    with runtime.strategy.scope():
        model = build_pretrainer(config, nsp=nsp)
    step = pretraining_step(runtime, model, recipe, sources, nsp=nsp)
    objects = {"weights": named_weights(model), "optimizer": step.optimizer, "global_step": step.global_step,
               "dropout": dropout_states(model)}  # fmt: skip
    if resume_from:
        load_training_checkpoint(resume_from, objects, name=CHECKPOINT_OWNER, what=CHECKPOINT_WHAT)
        step.restored()
    elif init_weights is not None:
        load_google(model, init_weights)
    elif args.init_checkpoint:
        load_weights(model, args.init_checkpoint)

    if runtime.is_chief:
        info = {"task": "pretraining", "model": recipe["model"], "config": config.__dict__, "nsp": nsp}
        info.update(amp=run.precision, recipe=recipe, global_batch=global_batch, replicas=replicas)
        info.update(workers=runtime.num_workers, distribution=runtime.kind)
        with atomic_write(results_dir / "run.json") as tmp:
            Path(tmp).write_text(json.dumps(info, indent=1))

    def save() -> None:
        save_training_checkpoint(
            results_dir / CHECKPOINT_NAME, objects, name=CHECKPOINT_OWNER, step=step.step_count,
            epoch=step.step_count * global_batch // train_samples, recipe=recipe, keep=run.keep_checkpoints, chief=runtime.is_chief,
            task="pretraining", config=config.__dict__, nsp=nsp,
        )  # fmt: skip

    first = step.step_count
    end = run.steps if args.stop_after is None else min(run.steps, first + args.stop_after)
    if runtime.is_chief:
        print(
            f"{recipe['model']} ({parameter_count(model) / 1e6:.1f}M parameters), seq {max_seq}, global batch "
            f"{global_batch} = {run.batch_per_gpu} x {run.accumulation} accumulation x {replicas} replicas, "
            f"{run.precision}{', XLA' if recipe['xla'] else ''}, steps {first}..{end} of {run.steps} ({runtime.kind})",
            file=sys.stderr,
        )
    logger = MetricsLogger(
        str(results_dir / "metrics.jsonl"), enabled=runtime.is_chief, total_steps=end, desc="pretrain"
    )
    mlperf.init_stop()
    mlperf.run_start()
    # an exception from here on logs run_stop "aborted"; a SIGTERM checkpoints the step and ends with 143
    with mlperf, logger, preemption(runtime) as preempted:
        losses, accuracy, reached = train(
            step, build_eval_step(model), eval_sets, runtime=runtime, mlperf=mlperf, log=logger,
            global_batch=global_batch, end=end, save=save, preemption=preempted,
        )  # fmt: skip
    if runtime.is_chief:
        export_google_npz(model, results_dir / "model.npz")
    if args.dump_weights:  # lets a multi-worker run be checked: every worker must hold the same weights
        np.savez(
            args.dump_weights.format(worker=runtime.worker_index),
            **{v.path: v.numpy() for v in model.variables},
        )
    summary = {"global_batch": global_batch, "steps": step.step_count, "losses": losses}
    return {**summary, "mlm_accuracy": accuracy, "reached_target": reached}


if __name__ == "__main__":
    main()
