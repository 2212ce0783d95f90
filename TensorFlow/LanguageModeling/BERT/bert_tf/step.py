"""The training step of a recipe on a tf.distribute runtime: what ``bert_tf.engine`` runs for pretraining and
SQuAD fine-tuning, and what ``benchmark.py`` times as "ours".

    with runtime.strategy.scope():
        model = build_pretrainer(config, nsp=False)
    step = pretraining_step(runtime, model, recipe, sources, nsp=False)   # LAMB, precision, XLA
    stats = step()                       # one optimizer step: run.accumulation micro-batches per replica
    step.readings(stats)                 # {"loss", "loss_mlm", "mlm_accuracy"}

A step reads its own input: micro-batch k of the run is a function of k (``bert_tf.data``), so the step
number alone says what it trains on, and a resumed run goes on as the unbroken one would have.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from zoo.recipe import run_config

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# what pretrain.py and benchmark.py run without --recipe
DEFAULT_RECIPE = CONFIG_DIR / "pretrain_phase1_1gpu.yaml"
SQUAD_RECIPE = CONFIG_DIR / "squad_1gpu.yaml"
PRECISIONS = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


class TrainStep:
    """``step()`` runs ``train_step`` (a tf.function of one optimizer step over the distributed input
    ``inputs(step_count)``) and returns its statistics as a numpy vector, summed over the replicas; sums of
    several steps' statistics give ``readings`` (mean losses of a window). ``global_step`` (a tf.Variable
    the checkpoint holds) follows ``step_count``."""

    def __init__(
        self, train_step, inputs: Callable, readings: Callable, optimizer, global_step, recipe: dict
    ):  # fmt: skip
        self.train_step, self.inputs, self.readings = train_step, inputs, readings
        self.optimizer, self.global_step, self.recipe = optimizer, global_step, recipe
        self.run = run_config(recipe)
        self.step_count = int(global_step.numpy())

    @property
    def lr(self) -> float:
        return float(self.optimizer.learning_rate)

    def __call__(self) -> np.ndarray:
        stats = np.atleast_1d(self.train_step(self.inputs(self.step_count)).numpy())
        self.step_count += 1
        self.global_step.assign(self.step_count)
        return stats

    def restored(self) -> None:
        """Take the step count from ``global_step`` after a checkpoint was read into it."""
        self.step_count = int(self.global_step.numpy())


def build_pretraining_train_step(runtime, model, optimizer, *, accumulation: int, nsp: bool, xla: bool):
    """``train_step(distributed stacked micro-batches) -> [mlm loss sum, correct, targets, nsp loss sum,
    nsp labels]`` over the whole global batch (``pretraining_readings`` turns sums of it into mean losses).

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


def pretraining_readings(stats) -> dict:
    """{"loss", "loss_mlm", "mlm_accuracy"} of pretraining ``train_step`` sums (one step's, or a window's)."""
    mlm = float(stats[0]) / max(float(stats[2]), 1.0)
    nsp = float(stats[3]) / float(stats[4]) if stats[4] > 0 else 0.0
    return {"loss": mlm + nsp, "loss_mlm": mlm, "mlm_accuracy": float(stats[1]) / max(float(stats[2]), 1.0)}


def pretraining_step(runtime, model, recipe: dict, sources: list, *, nsp: bool) -> TrainStep:
    """LAMB with the recipe's schedule and precision (``bert_tf.lamb.build_optimizer``) over
    ``run.accumulation`` micro-batches of ``sources`` (one micro-batch source per replica: ``bert_tf.data``),
    XLA as the recipe's ``xla`` says. Call under no strategy scope; the optimizer and the step counter are
    made in the runtime's."""
    import tensorflow as tf

    from bert_tf.data import stacked
    from bert_tf.lamb import build_optimizer

    run = run_config(recipe)
    with runtime.strategy.scope():
        optimizer = build_optimizer(recipe, run.precision, run.steps)
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    train_step = build_pretraining_train_step(
        runtime, model, optimizer, accumulation=run.accumulation, nsp=nsp, xla=bool(recipe["xla"])
    )
    horovod_rank = runtime.worker_index if runtime.hvd is not None else 0  # one replica per Horovod process

    def inputs(step: int):
        def per_replica(ctx):
            source = sources[ctx.replica_id_in_sync_group + horovod_rank]
            return {
                k: tf.constant(v)
                for k, v in stacked(source, step * run.accumulation, run.accumulation).items()
            }

        return runtime.strategy.experimental_distribute_values_from_function(per_replica)

    return TrainStep(train_step, inputs, pretraining_readings, optimizer, global_step, recipe)


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


def build_squad_train_step(runtime, model, optimizer, xla: bool):
    """``train_step(distributed batch) -> [loss, 1]`` (the mean of the start and end cross-entropies,
    averaged over replicas, and a count: sums of several steps give their mean)."""
    import keras
    import tensorflow as tf

    variables = model.trainable_variables
    replicas = runtime.num_replicas
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def gradients(batch):
        with tf.GradientTape() as tape:
            out = model(batch, training=True)
            loss = 0.5 * tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(
                    batch["start_positions"], out["start_logits"], from_logits=True
                )
                + keras.losses.sparse_categorical_crossentropy(
                    batch["end_positions"], out["end_logits"], from_logits=True
                )
            )
            objective = optimizer.scale_loss(loss / replicas) if scaled else loss / replicas
        return tape.gradient(objective, variables), loss

    if xla:
        gradients = tf.function(gradients, jit_compile=True)

    def replica_step(batch):
        grads, loss = gradients(batch)
        optimizer.apply(grads, variables)
        return loss

    @tf.function
    def train_step(batch):
        losses = runtime.strategy.run(replica_step, args=(batch,))
        mean = runtime.strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None) / replicas
        return tf.stack([mean, 1.0])

    return train_step


def build_squad_optimizer(recipe: dict, total_steps: int):
    """AdamW with linear warm-up and linear decay; no decay of biases and LayerNorm parameters."""
    import keras

    from bert_tf.lamb import NO_DECAY_NAMES, WarmupPolyDecay

    settings = recipe["optimizer"]
    optimizer = keras.optimizers.AdamW(
        WarmupPolyDecay(settings["lr"], total_steps, recipe["warmup"], power=1.0),
        weight_decay=settings["weight_decay"],
        epsilon=settings["eps"],
        global_clipnorm=1.0,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
    if run_config(recipe).precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


SQUAD_COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")


def squad_step(runtime, model, recipe: dict, features, total_steps: int) -> TrainStep:
    """AdamW fine-tuning over ``total_steps`` on SQuAD windows (``zoo.data.squad.Features``): each epoch
    shuffles the windows from (seed, epoch), each step takes the next global batch."""
    import tensorflow as tf

    run = run_config(recipe)
    replicas, batch = runtime.num_replicas, run.batch_per_gpu
    per_epoch = len(features) // (batch * replicas)
    arrays = {k: getattr(features, k).astype(np.int32) for k in SQUAD_COLUMNS}
    with runtime.strategy.scope():
        optimizer = build_squad_optimizer(recipe, total_steps)
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    train_step = build_squad_train_step(runtime, model, optimizer, bool(recipe["xla"]))

    def inputs(step: int):
        epoch, in_epoch = divmod(step, per_epoch)
        order = np.random.default_rng([run.seed, epoch]).permutation(len(features))

        def per_replica(ctx):
            first = (in_epoch * replicas + ctx.replica_id_in_sync_group) * batch
            rows = order[first : first + batch]
            return {k: tf.constant(v[rows]) for k, v in arrays.items()}

        return runtime.strategy.experimental_distribute_values_from_function(per_replica)

    def readings(stats) -> dict:
        return {"loss": float(stats[0]) / max(float(stats[1]), 1.0)}

    return TrainStep(train_step, inputs, readings, optimizer, global_step, recipe)
