"""RetinaNet's training loop: one epoch of training steps, and one evaluation on the validation set.
``retinanet.train`` builds the parts and calls these once per epoch.
"""

from __future__ import annotations

import itertools
import sys
import time

import torch
from zoo.log import MetricsLogger

from retinanet.evaluate import detect_dataset


def train_one_epoch(step, batches, logger, *, epoch: int, steps: int, first_step: int, log_every: int,
                    world: int, start: int = 0, after_step=None) -> list[float]:  # fmt: skip
    """Train the epoch's optimizer steps ``start`` ... ``steps - 1`` on ``batches`` (batch per GPU x
    accumulation images each, from the epoch's batch ``start``: zoo.coco.sampling.epoch_batches) with
    ``step`` (retinanet.step.TrainStep), calling ``after_step(steps done in the run, in the epoch)``
    after each; the loss is read every ``log_every`` steps and the epoch's images/s (all ranks) logged
    at its end. Returns the losses read."""
    step.train()
    losses, images = [], 0
    started = time.perf_counter()
    for i, batch in enumerate(itertools.islice(batches, steps - start), start):
        batch = batch.to(step.device)
        loss = step(batch.images, batch.boxes, batch.labels)
        images += len(batch.images)
        done = first_step + i + 1
        if i % log_every == 0 or i == steps - 1:
            value = loss.item()  # one wait for the device per reading, not per step
            losses.append(value)
            logger.progress(
                done, len(batch.images) * world, {"loss": value, "lr": step.scheduler.get_last_lr()[0]}
            )
            logger.log(done, {"loss": value, "epoch": epoch})
        if after_step is not None:
            after_step(done, i + 1)
    if not images:  # resumed after the epoch's last step
        return losses
    seconds = time.perf_counter() - started  # the last step's loss.item() waited for the device
    throughput = images * world / seconds
    logger.log(first_step + steps, {"epoch": epoch, "throughput": throughput}, units={"throughput": "img/s"})
    if logger.enabled:
        print(f"epoch {epoch}: {throughput:.1f} img/s ({seconds:.2f} s)", file=sys.stderr)
    return losses


def evaluate(
    model, loader, evaluation, *, epoch: int, step: int, category_ids, amp: str, device
) -> dict | None:
    """COCO box AP of ``model`` after ``epoch``: this rank's share of ``loader`` detected (decoding and
    NMS on the device) and ``evaluation`` (zoo.coco.Evaluation) merging every rank's detections and
    scoring them, at once or in a background process. Returns the scores (``map``, a fraction) on rank
    0 when scored at once, None elsewhere and while the background process scores them."""
    evaluation.start(epoch)
    with (
        torch.no_grad(),
        MetricsLogger(
            enabled=evaluation.env.is_primary, total_steps=len(loader), desc=f"eval epoch {epoch}"
        ) as bar,
    ):
        results = detect_dataset(model, loader, category_ids, amp=amp, device=device, progress=bar)
    return evaluation.score(epoch, step, results)
