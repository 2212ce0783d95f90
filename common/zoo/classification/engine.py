"""The image classifiers' training loop (ResNet-50, EfficientNet): one epoch of training steps, and the
evaluation of the validation set. Each model's ``engine.py`` names these.

    state = TrainState()
    for epoch in range(state.epoch, epochs):
        train_one_epoch(step, scheduler, train_loader, state, logger, steps_per_epoch=..., last_step=...)
        metrics = evaluate(step.model, val_loader, device, precision)        # {"top1", "top5", "loss"}

A model's ``train.py`` builds what these take (the recipe's step, the loaders, the loggers) and decides when to
evaluate, checkpoint and stop; reading these two functions tells the whole of training.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from zoo.log import MetricsLogger
from zoo.torch import autocast

# Steps at the start of a run left out of its images/s (compilation, cuDNN autotuning, CUDA-graph
# capture), as the benchmark leaves out its warm-up: the two report the same steady state.
THROUGHPUT_WARMUP_STEPS = 20


@dataclasses.dataclass
class TrainState:
    """Where a run is; what a checkpoint saves besides the model, optimizer and RNG states."""

    epoch: int = 0  # epochs finished
    step: int = 0  # optimizer steps done
    step_in_epoch: int = 0  # optimizer steps done in the current epoch
    best: dict = dataclasses.field(default_factory=dict)  # best value of each quality metric so far


class Throughput:
    """Images/s of all ranks over an epoch's steps after the run's warm-up; reads the clock only
    after the device has finished the queued work."""

    def __init__(self, device, warmup_steps: int = THROUGHPUT_WARMUP_STEPS):
        self.device, self.warmup_steps = torch.device(device), warmup_steps
        self.steps_seen, self.images, self.began = 0, 0, None

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start_epoch(self) -> None:
        """Count this epoch's steps from now, if the warm-up is over (else from its end)."""
        self.began, self.images = None, 0
        if self.steps_seen >= self.warmup_steps:
            self._synchronize()
            self.began = time.perf_counter()

    def count(self, images: int) -> None:
        """A finished step of ``images`` (all ranks); the step that ends the warm-up starts the clock."""
        self.steps_seen += 1
        if self.began is not None:
            self.images += images
        elif self.steps_seen == self.warmup_steps:
            self._synchronize()
            self.began = time.perf_counter()

    def rate(self) -> float | None:
        """Images/s since the clock started; None when no step was counted (the epoch ended in the warm-up)."""
        if self.began is None or self.images == 0:
            return None
        self._synchronize()
        return self.images / (time.perf_counter() - self.began)


def train_one_epoch(
    step: Callable,
    scheduler,
    loader,
    state: TrainState,
    logger: MetricsLogger,
    throughput: Throughput,
    *,
    steps_per_epoch: int,
    last_step: int,
    log_every: int,
    after_step: Callable[[TrainState], None] | None = None,
) -> None:
    """Train epoch ``state.epoch`` from its step ``state.step_in_epoch`` to its end, or to the run's
    ``last_step``. Logs loss and LR every ``log_every`` steps and at the epoch's end, then the epoch's
    throughput; ``after_step(state)`` runs after each step (checkpoints counted in steps)."""
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    throughput.start_epoch()
    batches = loader.epoch(state.epoch, state.step_in_epoch)
    for images, labels in itertools.islice(batches, steps_per_epoch - state.step_in_epoch):
        loss = step(images, labels)
        scheduler.step()
        state.step += 1
        state.step_in_epoch += 1
        images_done = labels.shape[0] * world_size
        throughput.count(images_done)
        epoch_ends = state.step_in_epoch == steps_per_epoch or state.step == last_step
        if state.step % log_every == 0 or epoch_ends:
            # float() waits for the device: the one sync of a logged step
            reading = {"loss": float(loss), "lr": scheduler.get_last_lr()[0], "epoch": state.epoch}
            logger.log(state.step, reading)
        logger.progress(state.step, images_done, {"epoch": state.epoch})
        if after_step is not None:
            after_step(state)
        if epoch_ends:
            break
    images_per_s = throughput.rate()
    if images_per_s is not None:  # None: the epoch ended within the run's warm-up
        logger.log(state.step, {"throughput": images_per_s}, units={"throughput": "img/s"})
    state.epoch, state.step_in_epoch = state.epoch + 1, 0


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader,
    device,
    precision: str,
    limit_batches: int | None = None,
    progress: MetricsLogger | None = None,
) -> dict:
    """Top-1, top-5 (%) and mean cross-entropy over the loader, summed over all ranks.

    ``progress``: a logger whose progress line shows batches done / total and images/s of all ranks.
    """
    model.eval()
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # correct@1, correct@5, loss sum, count
    for batch, (images, labels) in enumerate(loader.epoch(0)):
        if limit_batches is not None and batch >= limit_batches:
            break
        with autocast(device, precision):
            logits = model(images)
        logits = logits.float()
        top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
        hits = top5 == labels[:, None]
        totals += torch.stack(
            [
                hits[:, 0].sum(),
                hits.any(dim=1).sum(),
                nn.functional.cross_entropy(logits, labels, reduction="sum"),
                torch.tensor(labels.numel(), device=device),
            ]
        ).to(totals)
        if progress is not None:
            progress.progress(batch + 1, labels.shape[0] * world_size)
    if dist.is_initialized():
        dist.all_reduce(totals)
    model.train()
    count = max(1.0, float(totals[3]))
    return {
        "top1": 100 * float(totals[0]) / count,
        "top5": 100 * float(totals[1]) / count,
        "loss": float(totals[2]) / count,
    }
