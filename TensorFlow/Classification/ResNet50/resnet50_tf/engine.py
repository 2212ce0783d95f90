"""The training loop of ResNet-50: one epoch of optimizer steps, and an evaluation of the validation split.

train.py builds the parts (recipe, data, model, TrainStep, loggers) and calls these once per epoch.
"""

from __future__ import annotations

import math
import time

import numpy as np
from zoo.errors import UserError
from zoo.log import MetricsLogger


def train_one_epoch(step, iterator, *, first_step: int, steps_per_epoch: int, last_step: int, run, logger,
                    save, preemption=None) -> tuple[int, dict]:  # fmt: skip
    """Optimizer steps from ``first_step`` (steps done so far) to the end of its epoch, or ``last_step``.

    ``step`` is the TrainStep and ``iterator`` the epoch's global batches from ``first_step`` on. Every
    ``run.log_every`` steps and at the end, the mean loss and train top-1 of the steps since the last
    reading, the learning rate and the throughput go to ``logger``; ``save(step)`` writes a checkpoint
    where ``run.checkpoint_every`` counts steps. Returns (steps done, the last reading).

    ``preemption`` (zoo.cli.Preemption): after a SIGTERM, ``save`` writes the state after the step in
    progress and the run ends there (``Terminated``), every worker after the same step.
    """
    end = min(last_step, (first_step // steps_per_epoch + 1) * steps_per_epoch)
    losses, accuracies, started, reading = [], [], time.perf_counter(), {}
    for done in range(first_step + 1, end + 1):
        loss, accuracy = step(iterator)
        loss, accuracy = float(loss), float(accuracy)  # waits for the step
        if not math.isfinite(loss):
            raise UserError(f"loss is {loss} at step {done}: lower the learning rate or use bf16")
        losses.append(loss)
        accuracies.append(accuracy)
        logger.progress(done, items=step.global_batch, metrics={"loss": loss})
        if done % run.log_every == 0 or done == end:
            reading = {
                "loss": float(np.mean(losses)),
                "top1": 100 * float(np.mean(accuracies)),
                "lr": step.learning_rate(),
                "throughput": len(losses) * step.global_batch / max(time.perf_counter() - started, 1e-9),
            }
            logger.log(done, reading, units={"throughput": "img/s"})
            losses, accuracies, started = [], [], time.perf_counter()
        interval = run.checkpoint_every
        if interval is not None and interval.unit == "steps" and interval.due(0, done):
            save(done)
        if preemption is not None and preemption.requested(done):
            save(done)  # the state after step `done`: --resume auto continues with the next batch
            preemption.stop()
    return end, reading


def evaluate(step, batches, *, total: int, chief: bool, source) -> dict:
    """Top-1 and top-5 (%) of the model over ``batches`` (the validation split once, split over every
    replica and worker: data.eval_batches), and the images scored. The chief draws a progress line
    (batches done of ``total``, images/s)."""
    sums = np.zeros(3)  # top-1 hits, top-5 hits, images
    with MetricsLogger(None, enabled=chief, total_steps=total, desc="eval") as progress:
        for done, batch in enumerate(batches, 1):
            batch_sums = step.evaluate(batch).numpy()
            sums += batch_sums
            progress.progress(
                done, items=int(batch_sums[2]), metrics={"top1": 100 * sums[0] / max(sums[2], 1)}
            )
    top1, top5, images = sums
    if images == 0:
        raise UserError(f"the validation split of {source} is empty")
    return {"top1": 100 * top1 / images, "top5": 100 * top5 / images, "samples": int(images)}
