"""SSD300's training loop: one epoch of training steps, and one evaluation on the validation set.
``ssd.train`` builds the parts and calls these once per epoch.
"""

from __future__ import annotations

import itertools
import sys
import time

import torch
from zoo.log import MetricsLogger
from zoo.torch import autocast

from ssd.evaluate import detect_dataset
from ssd.model import build_inference_model, estimate_batchnorm_statistics


def train_one_epoch(
    step, batches, logger, *, epoch: int, steps: int, first_step: int, log_every: int, world: int,
    start: int = 0, after_step=None,
):  # fmt: skip
    """Train the epoch's optimizer steps ``start`` ... ``steps - 1`` on ``batches`` (batch per GPU x
    accumulation images each, from the epoch's batch ``start``: zoo.coco.sampling.epoch_batches) with ``step``
    (ssd.step.TrainStep), calling ``after_step(steps done in the run, in the epoch)`` after each; the
    loss is read every ``log_every`` steps and the epoch's images/s (all ranks) logged at its end.
    Returns the losses read."""
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
        # From the second epoch on nothing is left to compile or autotune: a steady-state figure.
        print(f"epoch {epoch}: {throughput:.1f} img/s ({seconds:.2f} s)", file=sys.stderr)
    return losses


def evaluate(model, loader, evaluation, *, epoch: int, step: int, category_ids, amp: str, channels_last: bool,
             device, precise_bn=None) -> dict | None:  # fmt: skip
    """COCO box AP of ``model`` after ``epoch``: the inference model (BatchNorm folded, weights in
    ``amp``'s precision) detects this rank's share of ``loader``, and ``evaluation`` (zoo.coco.
    Evaluation) merges every rank's detections and scores them. ``precise_bn``: (training loader,
    batches) to re-estimate BatchNorm statistics on first. Returns the scores (``map``, a fraction)
    on rank 0, None elsewhere and while a background process scores them."""
    evaluation.start(epoch)
    if precise_bn is not None:
        train_loader, batches = precise_bn

        def forward(batch) -> None:
            with autocast(device, amp):
                model(batch.to(device).images)

        estimate_batchnorm_statistics(model, itertools.islice(train_loader, batches), forward)
    inference_model = build_inference_model(model, amp, channels_last=channels_last)
    with (
        torch.no_grad(),
        MetricsLogger(
            enabled=evaluation.env.is_primary, total_steps=len(loader), desc=f"eval epoch {epoch}"
        ) as progress,
    ):
        results = detect_dataset(inference_model, loader, category_ids, device=device, progress=progress)
    return evaluation.score(epoch, step, results)
