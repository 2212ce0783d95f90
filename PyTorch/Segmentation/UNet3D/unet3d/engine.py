"""The training loop: one epoch of training steps, and the sliding-window evaluation of the held-out volumes.

    state = TrainState()
    while state.epoch < epochs:
        train_one_epoch(step, scheduler, patches, state, logger, throughput, steps_per_epoch=..., last_step=...)
        metrics = evaluate(step.model, val_cases, device, precision, patch=...)   # {"dice", "dice_kidney", ...}

``train.py`` builds what these take and decides when to evaluate, checkpoint and stop.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from zoo.log import MetricsLogger

from unet3d.data import volumes
from unet3d.inference import segment_volume
from unet3d.losses import DiceCELoss, dice_scores

# Steps at the start of a run left out of its patches/s (compilation, cuDNN autotuning, graph capture).
THROUGHPUT_WARMUP_STEPS = 10


@dataclasses.dataclass
class TrainState:
    """Where a run is; what a checkpoint saves besides the model, optimizer and RNG states."""

    epoch: int = 0  # epochs finished
    step: int = 0  # optimizer steps done
    step_in_epoch: int = 0  # optimizer steps done in the current epoch
    best: dict = dataclasses.field(default_factory=dict)  # best value of each quality metric so far


class Throughput:
    """Samples/s of all ranks over an epoch's steps after the run's warm-up; reads the clock only after
    the device has finished the queued work."""

    def __init__(self, device, warmup_steps: int = THROUGHPUT_WARMUP_STEPS):
        self.device, self.warmup_steps = torch.device(device), warmup_steps
        self.steps_seen, self.samples, self.began = 0, 0, None

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start_epoch(self) -> None:
        self.began, self.samples = None, 0
        if self.steps_seen >= self.warmup_steps:
            self._synchronize()
            self.began = time.perf_counter()

    def count(self, samples: int) -> None:
        self.steps_seen += 1
        if self.began is not None:
            self.samples += samples
        elif self.steps_seen == self.warmup_steps:
            self._synchronize()
            self.began = time.perf_counter()

    def rate(self) -> float | None:
        if self.began is None or self.samples == 0:
            return None
        self._synchronize()
        return self.samples / (time.perf_counter() - self.began)


def train_one_epoch(
    step: Callable,
    scheduler,
    patches,
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
    patches/s; ``after_step(state)`` runs after each step (checkpoints counted in steps, the crash test)."""
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    throughput.start_epoch()
    batches = patches.epoch(state.epoch, state.step_in_epoch)
    for images, labels in itertools.islice(batches, steps_per_epoch - state.step_in_epoch):
        loss = step(images, labels)
        scheduler.step()
        state.step += 1
        state.step_in_epoch += 1
        samples = images.shape[0] * world_size
        throughput.count(samples)
        epoch_ends = state.step_in_epoch == steps_per_epoch or state.step == last_step
        if state.step % log_every == 0 or epoch_ends:
            # float() waits for the device: the one sync of a logged step
            logger.log(
                state.step, {"loss": float(loss), "lr": scheduler.get_last_lr()[0], "epoch": state.epoch}
            )
        logger.progress(state.step, samples, {"epoch": state.epoch})
        if after_step is not None:
            after_step(state)
        if epoch_ends:
            break
    rate = throughput.rate()
    if rate is not None:  # None: the epoch ended within the run's warm-up
        logger.log(state.step, {"throughput": rate}, units={"throughput": "samples/s"})
    state.epoch, state.step_in_epoch = state.epoch + 1, 0


@torch.no_grad()
def evaluate(
    model,
    cases: dict,
    device,
    precision: str,
    *,
    patch,
    overlap: float = 0.5,
    window_batch: int = 1,
    progress: MetricsLogger | None = None,
) -> dict:
    """Mean Dice of kidney and tumour over the held-out volumes (sliding window, Gaussian blending), with
    each class's Dice and the DiceCE loss; this rank's share of the cases, summed over all ranks."""
    model.eval()
    rank = dist.get_rank() if dist.is_initialized() else 0
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    criterion = DiceCELoss()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # kidney, tumour, loss, volumes
    for done, (_, image, label) in enumerate(volumes(cases, rank, world_size, device), start=1):
        logits = segment_volume(model, image, patch, precision, overlap=overlap, window_batch=window_batch)
        scores = dice_scores(logits, label)[0]
        loss = criterion(logits, label)
        totals += torch.stack([scores[0], scores[1], loss, torch.ones((), device=device)]).to(totals)
        if progress is not None:
            progress.progress(done, world_size)
    if dist.is_initialized():
        dist.all_reduce(totals)
    model.train()
    count = max(1.0, float(totals[3]))
    kidney, tumour = float(totals[0]) / count, float(totals[1]) / count
    return {"dice": (kidney + tumour) / 2, "dice_kidney": kidney, "dice_tumour": tumour,
            "loss": float(totals[2]) / count, "samples": int(totals[3])}  # fmt: skip
