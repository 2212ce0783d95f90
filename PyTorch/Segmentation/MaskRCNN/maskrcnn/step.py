"""Mask R-CNN's training step, built from a recipe: the one that ``maskrcnn.train`` and
``maskrcnn.benchmark`` run.

    step = TrainStep(recipe, model, device, world_size=world_size)
    micro_batches = iter(loader)                  # (images, targets) of run.batch_per_gpu images each
    loss, parts = step(micro_batches)             # one optimizer step over run.accumulation of them

A step draws ``run.accumulation`` micro-batches, runs forward (the model computes its losses) under
autocast and backward for each, summing the gradients (DDP reduces them once, on the last), clips the
gradient norm where ``optimizer.clip_grad_norm`` says, and makes the SGD update and the learning-rate
schedule's step. The model comes ready (``maskrcnn.model.model_from_recipe``, weights loaded,
``prepare_for_speed`` applied where it trains "ours").
"""

from __future__ import annotations

import contextlib

import torch
from zoo.coco import global_batch, learning_rate
from zoo.recipe import run_config
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups


def lr_schedule(recipe: dict, world_size: int):
    """Linear warmup from ``warmup_factor`` over ``warmup_steps``, then x``gamma`` at each of
    ``decay_steps``. Step counts are given at ``optimizer.base_batch`` and scaled to the global batch."""
    s = recipe["schedule"]
    scale = recipe["optimizer"]["base_batch"] / global_batch(recipe, world_size)
    warmup = round(s["warmup_steps"] * scale)
    warmup_factor = s["warmup_factor"]
    milestones = [round(m * scale) for m in s["decay_steps"]]
    gamma = s["gamma"]

    def factor(step: int) -> float:
        f = gamma ** sum(step >= m for m in milestones)
        if step < warmup:
            f *= warmup_factor + (1 - warmup_factor) * step / warmup
        return f

    return factor


class TrainStep:
    """Optimizer, schedule and scaler of one run around ``model``; calling it makes one optimizer step.

    The attributes ``model`` (the plain module, for checkpoints and evaluation), ``optimizer``,
    ``scheduler`` and ``scaler`` are what a checkpoint saves and restores.
    """

    def __init__(self, recipe: dict, model: torch.nn.Module, device, *, world_size: int = 1) -> None:
        run = run_config(recipe)
        o = recipe["optimizer"]
        self.device = torch.device(device)
        self.amp, self.accumulation, self.clip = run.precision, run.accumulation, o["clip_grad_norm"]
        self.model = model
        self.optimizer = torch.optim.SGD(
            parameter_groups(model, o["weight_decay"]),
            lr=learning_rate(recipe, world_size),
            momentum=o["momentum"],
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_schedule(recipe, world_size))
        self.scaler = grad_scaler(self.device, self.amp)
        # Some proposals leave a head unused in a step: DDP cannot assume a static graph here.
        self.network = distributed_model(model, self.device, static_graph=False) if world_size > 1 else model

    def train(self) -> None:
        """Training mode; evaluation may have switched it off."""
        self.model.train()

    def __call__(self, micro_batches):
        """One optimizer step over ``run.accumulation`` micro-batches drawn from ``micro_batches`` (an
        iterator of ``(images, targets)``). Returns the step's loss (a device tensor: no host sync)
        and the last micro-batch's loss parts."""
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(self.accumulation):
            images, targets = next(micro_batches)
            images = [image.to(self.device, non_blocking=True) for image in images]
            targets = [
                {key: (v.to(self.device) if torch.is_tensor(v) else v) for key, v in t.items()}
                for t in targets
            ]
            # Gradients are summed over micro-steps; DDP reduces only on the last one.
            skip_sync = self.network is not self.model and k < self.accumulation - 1
            with self.network.no_sync() if skip_sync else contextlib.nullcontext():
                with autocast(self.device, self.amp):
                    parts = self.network(images, targets)
                loss = sum(parts.values()) / self.accumulation
                self.scaler.scale(loss).backward()
            total = total + loss.detach()
        if self.clip:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return total, parts
