"""The training loop: one epoch of training steps, and the evaluation of the validation split.

    state = TrainState()
    while state.epoch < epochs:
        train_one_epoch(step, scheduler, train_batches, state, logger, steps_per_epoch=..., last_step=...)
        metrics = evaluate(step.model, val_batches, device, precision)       # {"top1", "loss"}

``train.py`` builds what these take and decides when to evaluate, checkpoint and stop; reading these
two functions tells the whole of training.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from zoo.log import MetricsLogger
from zoo.torch import autocast


@dataclasses.dataclass
class TrainState:
    """Where a run is; what a checkpoint saves besides the model, optimizer and RNG states."""

    epoch: int = 0  # epochs finished
    step: int = 0  # optimizer steps done
    step_in_epoch: int = 0  # optimizer steps done in the current epoch
    best: dict = dataclasses.field(default_factory=dict)  # best value of each quality metric so far


def train_one_epoch(
    step: Callable,
    scheduler,
    batches,
    state: TrainState,
    logger: MetricsLogger,
    *,
    steps_per_epoch: int,
    last_step: int,
    log_every: int,
    after_step: Callable[[TrainState], None] | None = None,
) -> None:
    """Train epoch ``state.epoch`` from its step ``state.step_in_epoch`` to its end, or to the run's
    ``last_step``: loss and LR every ``log_every`` steps, the epoch's samples/s at its end;
    ``after_step(state)`` runs after each step (checkpoints counted in steps)."""
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    began, samples = time.perf_counter(), 0
    for inputs, labels in batches.epoch(state.epoch, state.step_in_epoch):
        loss = step(inputs, labels)
        scheduler.step()
        state.step += 1
        state.step_in_epoch += 1
        samples += labels.shape[0] * world_size
        epoch_ends = state.step_in_epoch == steps_per_epoch or state.step == last_step
        if state.step % log_every == 0 or epoch_ends:
            # float() waits for the device: the one sync of a logged step
            logger.log(
                state.step, {"loss": float(loss), "lr": scheduler.get_last_lr()[0], "epoch": state.epoch}
            )
        logger.progress(state.step, labels.shape[0] * world_size, {"epoch": state.epoch})
        if after_step is not None:
            after_step(state)
        if epoch_ends:
            break
    logger.log(
        state.step, {"throughput": samples / (time.perf_counter() - began)}, units={"throughput": "samples/s"}
    )
    state.epoch, state.step_in_epoch = state.epoch + 1, 0


@torch.no_grad()
def evaluate(model: nn.Module, batches, device, precision: str) -> dict:
    """Top-1 (%) and mean cross-entropy over every validation sample, summed over all ranks."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss sum, count
    for inputs, labels in batches.epoch(0):
        with autocast(device, precision):
            logits = model(inputs)
        logits = logits.float()
        totals += torch.stack(
            [
                (logits.argmax(dim=1) == labels).sum(),
                nn.functional.cross_entropy(logits, labels, reduction="sum"),
                torch.tensor(labels.numel(), device=device),
            ]
        ).to(totals)
    if dist.is_initialized():
        dist.all_reduce(totals)
    model.train()
    count = max(1.0, float(totals[2]))
    return {"top1": 100 * float(totals[0]) / count, "loss": float(totals[1]) / count}
