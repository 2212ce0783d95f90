"""The one training step of ResNet-50 (and its evaluation step): what train.py, evaluate.py and the
benchmark run, under tf.distribute or Horovod, with the recipe's precision and optional XLA."""

from __future__ import annotations

# --amp values -> Keras dtype policies
PRECISIONS = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


def set_precision(precision: str) -> None:
    """The global Keras dtype policy of ``precision`` (bf16, fp16, fp32); call it before building the model."""
    import keras

    keras.mixed_precision.set_global_policy(PRECISIONS[precision])


class TrainStep:
    """``step(iterator)``: one optimizer step on the next global batch, returning (loss, accuracy) as
    tensors (reading them waits for the step); ``step.evaluate(batch)``: [top-1 hits, top-5 hits, images]
    of a validation batch, summed over every replica and worker. ``optimizer`` may be None for evaluation.

    The loss is averaged over the global batch; batch-norm moving statistics are averaged over the
    replicas after each step (each replica sees other images), so every replica saves and evaluates the
    same model. Under Horovod every rank takes rank 0's variables after the first step.
    """

    def __init__(self, runtime, model, optimizer, global_batch: int, label_smoothing: float = 0.0, xla: bool = False):  # fmt: skip
        self.runtime, self.model, self.optimizer = runtime, model, optimizer
        self.global_batch = global_batch
        self._train, self._evaluate = _step_functions(
            runtime, model, optimizer, global_batch, label_smoothing, xla
        )
        self._broadcast_done = runtime.hvd is None

    def __call__(self, iterator):
        loss, accuracy = self._train(iterator)
        if not self._broadcast_done:  # Horovod: make every rank start from rank 0's variables
            self.runtime.hvd.broadcast_variables(self.model.variables + self.optimizer.variables, root_rank=0)
            self._broadcast_done = True
        return loss, accuracy

    def evaluate(self, batch):
        return self._evaluate(batch)

    def learning_rate(self) -> float:
        """The learning rate of the next step (the schedule at the optimizer's iteration count)."""
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        lr = inner.learning_rate
        return float(lr(inner.iterations) if callable(lr) else lr)


def _step_functions(runtime, model, optimizer, global_batch: int, label_smoothing: float, xla: bool):
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
