"""The training loop of both BERT tasks and their evaluations (TensorFlow), each read top to bottom.

    window = TrainWindow()
    losses = train_one_epoch(step, steps, log=log, window=window, end=end, global_batch=global_batch)
    evaluate(eval_step, eval_batches)                                    # {"mlm_accuracy": fraction}
    evaluate_squad(model, recipe, tokenizer, predict_file, results)      # {"exact_match", "f1"} %

``train_one_epoch`` runs one epoch of SQuAD fine-tuning, or, in pretraining (a run counted in steps),
the steps up to the next evaluation or checkpoint. ``pretrain.py`` and ``finetune_squad.py`` only wire:
they build the step (``bert_tf.step``), the data and the loggers, call these, save and stop at the target.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
from zoo.errors import UserError

INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@dataclasses.dataclass
class TrainWindow:
    """Train readings since the last logged one, kept across ``train_one_epoch`` calls: the sum of the
    steps' statistics, the steps, the training seconds."""

    sums: np.ndarray | None = None
    steps: int = 0
    seconds: float = 0.0


def train_one_epoch(
    step, steps: int, *, log, window: TrainWindow, end: int, global_batch: int, preemption=None, save=None
) -> list[float]:
    """``steps`` optimizer steps of ``step`` (bert_tf.step.TrainStep); returns each step's loss. Every
    ``run.log_every`` steps and at step ``end`` logs the window's readings (mean losses), the learning
    rate and the sequences per second of all replicas (time outside this function not counted).

    ``preemption`` (zoo.cli.Preemption): after a SIGTERM, ``save()`` writes the state after the step in
    progress and the run ends there (``Terminated``), every worker after the same step."""
    losses = []
    began = time.perf_counter()
    for _ in range(steps):
        stats = step()  # the step's statistics on the host: it has finished
        loss = step.readings(stats)["loss"]
        if not math.isfinite(loss):
            raise UserError(f"loss is {loss} at step {step.step_count}: lower the learning rate or use bf16")
        losses.append(loss)
        window.sums = stats if window.sums is None else window.sums + stats
        window.steps += 1
        log.progress(step.step_count, items=global_batch, metrics={"loss": loss})
        if step.step_count % step.run.log_every == 0 or step.step_count == end:
            seconds = window.seconds + time.perf_counter() - began
            throughput = window.steps * global_batch / max(seconds, 1e-9)
            readings = {**step.readings(window.sums), "lr": step.lr, "throughput": throughput}
            log.log(step.step_count, readings, units={"throughput": "seq/s"})
            window.sums, window.steps, window.seconds = None, 0, 0.0
            began = time.perf_counter()
        if preemption is not None and preemption.requested(step.step_count):
            save()  # the state after this step: --resume auto continues with the next micro-batches
            preemption.stop()
    window.seconds += time.perf_counter() - began
    return losses


def evaluate(eval_step, batches) -> dict:
    """{"mlm_accuracy": correct predictions / masked tokens} (MLPerf BERT's metric). Every worker
    evaluates the same batches (no collectives), so every worker takes the same stop decision."""
    totals = np.zeros(2)
    for batch in batches:
        totals += eval_step(batch).numpy()
    return {"mlm_accuracy": float(totals[0] / max(totals[1], 1.0))}


def predict(model, features, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Start and end logits of every SQuAD window."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def forward(batch):
        return model(batch, training=False)

    starts, ends = [], []
    for first in range(0, len(features), batch_size):
        batch = {k: getattr(features, k)[first : first + batch_size].astype(np.int32) for k in INPUTS}
        out = forward(batch)
        starts.append(out["start_logits"].numpy())
        ends.append(out["end_logits"].numpy())
    return np.concatenate(starts), np.concatenate(ends)


def evaluate_squad(model, recipe: dict, tokenizer, predict_file, results: Path) -> dict:
    """{"exact_match", "f1"} in percent (the official SQuAD v1.1 metric, ``zoo.data.squad``) of ``model``'s
    answers to the questions of ``predict_file``; the answers are written to results/predictions.json."""
    from zoo.data.squad import best_spans, evaluate_predictions, make_features, read_squad
    from zoo.io import atomic_write

    examples, raw = read_squad(predict_file)
    window = dict(max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"])
    features = make_features(examples, tokenizer, **window)
    start, end = predict(model, features)
    answers = best_spans(
        examples, features, start, end, n_best=recipe["n_best"], max_answer_tokens=recipe["max_answer_tokens"]
    )
    results.mkdir(parents=True, exist_ok=True)
    with atomic_write(results / "predictions.json") as tmp:
        Path(tmp).write_text(json.dumps(answers, indent=1))
    return evaluate_predictions(raw, answers)
