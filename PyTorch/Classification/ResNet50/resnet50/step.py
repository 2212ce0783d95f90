"""The training step of a recipe: what ``train.py`` runs and ``benchmark.py`` times as "ours".

    step = build_train_step(recipe, device)           # model, optimizer, loss, compile, from the recipe
    loss = step(images, labels)                       # forward (autocast), backward, SGD step

Every speed lever is a recipe key: ``train.compile`` (false, or a ``torch.compile`` mode:
``reduce-overhead`` adds CUDA graphs), ``train.channels_last``, ``train.cudnn_benchmark``,
``train.amp``, ``optimizer.fused`` and ``data.batch_size``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from zoo.recipe import compile_mode
from zoo.recipe import flag as recipe_flag
from zoo.torch import amp_dtype, autocast, distributed_model, grad_scaler, parameter_groups

from resnet50.model import ResNet, resnet50


def peak_learning_rate(recipe: dict, world_size: int) -> float:
    """``optimizer.lr_per_256`` scaled linearly with the global batch (batch per GPU x processes)."""
    return float(recipe["optimizer"]["lr_per_256"]) * int(recipe["data"]["batch_size"]) * world_size / 256


def recipe_levers(recipe: dict) -> dict:
    """The step's speed levers as the recipe sets them, checked (a bad value is a one-line SystemExit):
    ``amp``, ``compile`` (a mode or None), ``channels_last``, ``fused_optimizer``, ``cudnn_benchmark``."""
    train_cfg = recipe["train"]
    amp = str(train_cfg["amp"])
    amp_dtype(amp)
    return {
        "amp": amp,
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
    """One optimisation step: forward under autocast, label-smoothed cross-entropy, backward (scaled for
    fp16), SGD. ``model`` is the plain module (its state_dict is the checkpoint's); ``forward`` is what
    runs it (DDP and ``torch.compile`` wrapped around ``model`` as the recipe and world size ask)."""

    def __init__(self, model: nn.Module, recipe: dict, device, world_size: int = 1):
        train_cfg, opt_cfg = recipe["train"], recipe["optimizer"]
        self.device = torch.device(device)
        self.levers = recipe_levers(recipe)
        self.amp, self.channels_last = self.levers["amp"], self.levers["channels_last"]
        self.compile_mode, self.fused_optimizer = self.levers["compile"], self.levers["fused_optimizer"]
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
        self.scaler = grad_scaler(self.device, self.amp)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=float(train_cfg["label_smoothing"]))
        forward = distributed_model(self.model, self.device) if world_size > 1 else self.model
        self.forward = torch.compile(forward, mode=self.compile_mode) if self.compile_mode else forward

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One step on a batch already on the device; returns the loss (detached, not synchronised)."""
        with autocast(self.device, self.amp):
            loss = self.criterion(self.forward(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def train(self) -> TrainStep:
        self.forward.train()
        return self


def build_train_step(
    recipe: dict, device, *, world_size: int = 1, model: nn.Module | None = None
) -> TrainStep:
    """The recipe's training step on ``device`` (a new model from the recipe unless ``model`` is given,
    e.g. with pretrained weights already loaded). Under several processes the model is DDP-wrapped."""
    return TrainStep(build_model(recipe) if model is None else model, recipe, device, world_size).train()
