"""The training step of a recipe: what the engine runs, and what the benchmark and the scaling mode time.

    step = build_train_step(recipe, device)           # model, optimizer, loss, compile, from the recipe
    loss = step(images, labels)                       # forward (autocast), backward, SGD step

One call is one optimizer step: ``accumulation`` micro-steps of ``run.batch_per_gpu`` images each,
gradients summed, one SGD update. Every speed lever is a recipe key: ``train.compile`` (false, or a
``torch.compile`` mode: ``reduce-overhead`` adds CUDA graphs), ``train.channels_last``,
``train.cudnn_benchmark``, ``run.precision``, ``optimizer.fused`` and ``run.batch_per_gpu``.

Two rules say how a recipe carries over to another number of GPUs, both recipe keys:
``optimizer.global_batch`` (null: the global batch is batch per GPU x ``run.accumulation`` x GPUs and
grows with them; a number: it stays that number, each GPU accumulating as many micro-steps as it takes)
and ``optimizer.lr_scaling`` (how the peak LR follows the global batch from ``optimizer.lr_per_256``).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
from zoo.errors import UserError
from zoo.recipe import compile_mode, run_config
from zoo.recipe import flag as recipe_flag
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups

from resnet50.model import ResNet, resnet50

# How the peak LR follows the global batch, from its value at 256 images (optimizer.lr_per_256).
LR_SCALING = {
    "linear": lambda ratio: ratio,  # Goyal et al., "ImageNet in 1 hour": the reference rule for SGD
    "sqrt": math.sqrt,
    "none": lambda ratio: 1.0,
}


def accumulation(recipe: dict, world_size: int) -> int:
    """Micro-steps per optimizer step on ``world_size`` GPUs: ``run.accumulation``, or, where
    ``optimizer.global_batch`` fixes the global batch, that batch / (batch per GPU x GPUs)."""
    run, fixed = run_config(recipe), recipe["optimizer"]["global_batch"]
    if fixed is None:
        return run.accumulation
    if isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 1:
        raise UserError(f"optimizer.global_batch must be a positive integer or null, not {fixed!r}")
    if run.accumulation != 1:
        raise UserError("optimizer.global_batch sets the accumulation: leave run.accumulation at 1")
    micro_steps, rest = divmod(fixed, run.batch_per_gpu * world_size)
    if rest or micro_steps == 0:
        raise UserError(
            f"optimizer.global_batch {fixed} is not a multiple of run.batch_per_gpu x GPUs "
            f"({run.batch_per_gpu} x {world_size})"
        )
    return micro_steps


def global_batch(recipe: dict, world_size: int) -> int:
    """Images of one optimizer step over all processes: batch per GPU x accumulation x processes."""
    return run_config(recipe).batch_per_gpu * accumulation(recipe, world_size) * world_size


def peak_learning_rate(recipe: dict, world_size: int) -> float:
    """``optimizer.lr_per_256`` scaled to the global batch by ``optimizer.lr_scaling``."""
    rule = recipe["optimizer"]["lr_scaling"]
    if rule not in LR_SCALING:
        raise UserError(f"optimizer.lr_scaling must be one of {', '.join(LR_SCALING)}, not {rule!r}")
    ratio = global_batch(recipe, world_size) / 256
    return float(recipe["optimizer"]["lr_per_256"]) * LR_SCALING[rule](ratio)


def lr_schedule(recipe: dict, optimizer, steps_per_epoch: int, total_steps: int):
    """The LR scheduler, stepped once per optimizer step: linear warm-up over ``schedule.warmup_epochs``
    (from 1/warm-up steps of the peak to the peak), then cosine decay to 0 at ``total_steps``."""
    warmup_steps = int(round(float(recipe["schedule"]["warmup_epochs"]) * steps_per_epoch))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def recipe_levers(recipe: dict) -> dict:
    """The step's speed levers as the recipe sets them, checked (a bad value is a UserError naming the
    key): ``precision``, ``compile`` (a mode or None), ``channels_last``, ``fused_optimizer``,
    ``cudnn_benchmark``."""
    train_cfg = recipe["train"]
    return {
        "precision": run_config(recipe).precision,
        "compile": compile_mode(train_cfg["compile"]),
        "channels_last": recipe_flag(train_cfg["channels_last"], "train.channels_last"),
        "fused_optimizer": recipe_flag(recipe["optimizer"]["fused"], "optimizer.fused"),
        "cudnn_benchmark": recipe_flag(train_cfg["cudnn_benchmark"], "train.cudnn_benchmark"),
    }


def build_model(recipe: dict) -> ResNet:
    """ResNet-50 v1.5 with the recipe's classes and residual initialisation (random weights)."""
    model_cfg = recipe["model"]
    return resnet50(
        num_classes=int(model_cfg["num_classes"]),
        zero_init_residual=recipe_flag(model_cfg["zero_init_residual"], "model.zero_init_residual"),
    )


class TrainStep:
    """One optimizer step: ``accumulation`` micro-steps (forward under autocast, label-smoothed
    cross-entropy, backward, scaled for fp16), then SGD. ``model`` is the plain module (its state_dict
    is the checkpoint's); ``forward`` is what runs it (DDP and ``torch.compile`` wrapped around
    ``model`` as the recipe and world size ask)."""

    def __init__(self, model: nn.Module, recipe: dict, device, world_size: int = 1):
        train_cfg, opt_cfg = recipe["train"], recipe["optimizer"]
        self.device = torch.device(device)
        self.levers = recipe_levers(recipe)
        self.precision, self.channels_last = self.levers["precision"], self.levers["channels_last"]
        self.compile_mode, self.fused_optimizer = self.levers["compile"], self.levers["fused_optimizer"]
        self.accumulation = accumulation(recipe, world_size)
        if self.device.type == "cuda":
            # fast_math turns autotuning on; the recipe may turn it off
            torch.backends.cudnn.benchmark = self.levers["cudnn_benchmark"]
        self.model = model.to(self.device)
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.peak_lr = peak_learning_rate(recipe, world_size)
        self.optimizer = torch.optim.SGD(
            parameter_groups(self.model, float(opt_cfg["weight_decay"])),
            lr=self.peak_lr,
            momentum=float(opt_cfg["momentum"]),
            nesterov=recipe_flag(opt_cfg["nesterov"], "optimizer.nesterov"),
            fused=self.fused_optimizer,
        )
        self.scaler = grad_scaler(self.device, self.precision)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=float(train_cfg["label_smoothing"]))
        self.ddp = None
        if world_size > 1:
            # DDP's static graph loses gradients under no_sync (pytorch#187732): only without accumulation
            self.ddp = distributed_model(self.model, self.device, static_graph=self.accumulation == 1)
        forward = self.ddp or self.model
        self.forward = torch.compile(forward, mode=self.compile_mode) if self.compile_mode else forward

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step on ``batch_per_gpu x accumulation`` images already on the device; returns
        the loss (the micro-steps' mean, detached, not synchronised)."""
        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        micro_batches = zip(
            images.tensor_split(self.accumulation), labels.tensor_split(self.accumulation), strict=True
        )
        for micro, (micro_images, micro_labels) in enumerate(micro_batches, start=1):
            # gradients are all-reduced once, in the last micro-step's backward
            syncing = self.ddp is None or micro == self.accumulation
            with contextlib.nullcontext() if syncing else self.ddp.no_sync():
                with autocast(self.device, self.precision):
                    loss = self.criterion(self.forward(micro_images), micro_labels) / self.accumulation
                self.scaler.scale(loss).backward()
            losses.append(loss.detach())
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return sum(losses)

    def train(self) -> TrainStep:
        self.forward.train()
        return self


def build_train_step(
    recipe: dict, device, *, world_size: int = 1, model: nn.Module | None = None
) -> TrainStep:
    """The recipe's training step on ``device`` (a new model from the recipe unless ``model`` is given,
    e.g. with pretrained weights already loaded). Under several processes the model is DDP-wrapped."""
    return TrainStep(build_model(recipe) if model is None else model, recipe, device, world_size).train()
