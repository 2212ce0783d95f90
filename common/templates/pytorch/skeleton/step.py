"""One training step: what train.py, the engine and the benchmark all run.

    step = TrainStep(recipe, device, world_size)
    loss = step(inputs, labels)      # run.accumulation micro-steps, then one optimizer step

Everything a step does comes from the recipe: the network (model:), the optimizer (optimizer:), the
precision, the batch per GPU and the accumulation (run:), and every speed lever (a recipe key, off by
default where it does not pay on every GPU).
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn
from zoo.recipe import run_config
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups

from skeleton.model import build_model


class TrainStep:
    """Forward, loss, backward and optimizer step of one global batch of this rank."""

    def __init__(self, recipe: dict, device, world_size: int = 1, model: nn.Module | None = None):
        run, optimizer = run_config(recipe), recipe["optimizer"]
        self.device, self.precision, self.accumulation = torch.device(device), run.precision, run.accumulation
        self.model = (model if model is not None else build_model(recipe)).to(self.device)
        groups = parameter_groups(self.model, float(optimizer["weight_decay"]))
        self.optimizer = torch.optim.AdamW(groups, lr=float(optimizer["lr"]), betas=(0.9, 0.999))
        self.scaler = grad_scaler(self.device, run.precision)
        self.wrapped = distributed_model(self.model, self.device) if world_size > 1 else self.model
        self.loss_fn = nn.CrossEntropyLoss()

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step over ``inputs`` split into run.accumulation micro-batches; returns the mean
        loss as a tensor (reading it is the caller's choice: each read waits for the device)."""
        self.model.train()
        total = torch.zeros((), device=self.device)
        micro = zip(inputs.chunk(self.accumulation), labels.chunk(self.accumulation), strict=True)
        for i, (x, y) in enumerate(micro):
            last = i == self.accumulation - 1
            sync = (
                self.wrapped.no_sync()
                if (not last and self.wrapped is not self.model)
                else contextlib.nullcontext()
            )
            with sync:
                with autocast(self.device, self.precision):
                    loss = self.loss_fn(self.wrapped(x), y) / self.accumulation
                self.scaler.scale(loss).backward()
            total += loss.detach()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return total


def lr_schedule(recipe: dict, optimizer, total_steps: int):
    """Linear warm-up over schedule.warmup_steps, then cosine decay to 0 at ``total_steps``."""
    warmup = int(recipe["schedule"]["warmup_steps"])

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
