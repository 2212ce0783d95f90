"""Mask R-CNN's training loop: one epoch of training steps, and one evaluation on the validation set.
``maskrcnn.train`` builds the parts and calls these once per epoch.
"""

from __future__ import annotations

import time

from zoo.log import MetricsLogger

from maskrcnn.evaluate import detect_dataset


def train_one_epoch(
    step, loader, logger, *, epoch: int, steps: int, first_step: int, log_every: int, images_per_step: int,
    start: int = 0, after_step=None,
):  # fmt: skip
    """Train the epoch's optimizer steps ``start`` ... ``steps - 1`` with ``step`` (maskrcnn.step.TrainStep),
    each over run.accumulation micro-batches of ``loader`` (whose sampler starts at step ``start``'s
    first micro-batch), calling ``after_step(steps done in the run, in the epoch)`` after each; the loss
    and its parts are read every ``log_every`` steps and the epoch's images/s (all ranks:
    ``images_per_step`` a step) logged at its end. Returns the losses read."""
    step.train()
    micro_batches = iter(loader)
    losses = []
    started = time.perf_counter()
    for i in range(start, steps):
        loss, parts = step(micro_batches)
        done = first_step + i + 1
        if i % log_every == 0 or i == steps - 1:
            value = float(loss)  # one wait for the device per reading, not per step
            losses.append(value)
            logger.progress(done, images_per_step, {"loss": value, "lr": step.scheduler.get_last_lr()[0]})
            logger.log(
                done, {"loss": value, "epoch": epoch, **{k: float(v.detach()) for k, v in parts.items()}}
            )
        if after_step is not None:
            after_step(done, i + 1)
    if start == steps:  # resumed after the epoch's last step
        return losses
    throughput = (steps - start) * images_per_step / (time.perf_counter() - started)
    logger.log(first_step + steps, {"epoch": epoch, "throughput": throughput}, units={"throughput": "img/s"})
    return losses


def evaluate(model, loader, evaluation, *, epoch: int, step: int, amp: str, device) -> dict | None:
    """COCO box and mask AP of ``model`` after ``epoch``: the model detects and segments this rank's
    share of ``loader`` under ``amp``'s autocast, and ``evaluation`` (zoo.coco.Evaluation) merges every
    rank's results and scores them. Returns the scores (``map``, ``mask_map``: fractions) on rank 0,
    None elsewhere and while a background process scores them."""
    evaluation.start(epoch)
    with MetricsLogger(
        enabled=evaluation.env.is_primary, total_steps=len(loader), desc=f"eval epoch {epoch}"
    ) as progress:
        results = detect_dataset(model, loader, device=device, amp=amp, progress=progress)
    return evaluation.score(epoch, step, results)
