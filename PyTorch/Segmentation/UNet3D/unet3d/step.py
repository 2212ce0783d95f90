"""The training step of a recipe: what the engine runs and what the benchmark times.

    step = build_train_step(recipe, device)      # model, SGD, loss, compile and layout from the recipe
    loss = step(images, labels)                  # forward (autocast), DiceCE, backward, SGD step

One call is one optimizer step: ``run.accumulation`` micro-steps of ``run.batch_per_gpu`` patches each.
Speed levers, all recipe keys: ``run.precision``, ``train.compile`` (false or a torch.compile mode;
``reduce-overhead`` adds CUDA graphs on the fixed patch shape), ``train.channels_last`` (NDHWC
activations and weights, channels_last_3d), ``train.cudnn_benchmark``.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
from zoo.errors import UserError
from zoo.recipe import compile_mode, run_config
from zoo.recipe import flag as recipe_flag
from zoo.torch import autocast, distributed_model, grad_scaler

from unet3d.losses import DiceCELoss
from unet3d.model import UNet3D


def build_model(recipe: dict) -> UNet3D:
    """The recipe's 3D U-Net (random weights)."""
    model_cfg = recipe["model"]
    width, levels = model_cfg["width"], model_cfg["levels"]
    for key, value in (("model.width", width), ("model.levels", levels)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < (1 if key == "model.width" else 2)
        ):
            raise UserError(f"{key} must be a positive integer (levels >= 2), not {value!r}")
    return UNet3D(in_channels=1, classes=3, width=width, levels=levels)


def patch_shape(recipe: dict, model: UNet3D | None = None) -> tuple[int, int, int]:
    """data.patch as a checked (D, H, W): each side a multiple of the model's 2**levels."""
    patch = recipe["data"]["patch"]
    if not isinstance(patch, list) or len(patch) != 3 or not all(isinstance(s, int) and s > 0 for s in patch):
        raise UserError(f"data.patch must be three positive integers, not {patch!r}")
    divisor = 2 ** int(recipe["model"]["levels"])
    if any(side % divisor for side in patch):
        raise UserError(f"data.patch {patch}: each side must be a multiple of 2**model.levels = {divisor}")
    return tuple(patch)


def recipe_levers(recipe: dict) -> dict:
    """The step's speed levers, checked (a bad value is a UserError naming the key)."""
    train_cfg = recipe["train"]
    return {
        "precision": run_config(recipe).precision,
        "compile": compile_mode(train_cfg["compile"]),
        "channels_last": recipe_flag(train_cfg["channels_last"], "train.channels_last"),
        "cudnn_benchmark": recipe_flag(train_cfg["cudnn_benchmark"], "train.cudnn_benchmark"),
    }


def lr_schedule(recipe: dict, optimizer, steps_per_epoch: int):
    """MLPerf's warm-up: in epoch e (1-based) of the first ``schedule.warmup_epochs``, the LR is
    init_lr + (lr - init_lr) * e / warmup_epochs; then the peak ``optimizer.lr``, constant."""
    opt_cfg = recipe["optimizer"]
    peak, init = float(opt_cfg["lr"]), float(opt_cfg["init_lr"])
    warmup = float(recipe["schedule"]["warmup_epochs"])

    def factor(step: int) -> float:
        epoch = step // steps_per_epoch + 1
        if warmup <= 0 or epoch > warmup:
            return 1.0
        return (init + (peak - init) * epoch / warmup) / peak

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class TrainStep:
    """One optimizer step: ``accumulation`` micro-steps (forward under autocast, DiceCE loss, backward,
    scaled for fp16), then SGD with Nesterov momentum. ``model`` is the plain module (the checkpoint's
    state_dict); ``forward`` runs it (DDP and torch.compile wrapped as the recipe and world size ask)."""

    def __init__(self, model: nn.Module, recipe: dict, device, world_size: int = 1):
        opt_cfg = recipe["optimizer"]
        self.device = torch.device(device)
        self.levers = recipe_levers(recipe)
        self.precision, self.channels_last = self.levers["precision"], self.levers["channels_last"]
        self.compile_mode = self.levers["compile"]
        self.accumulation = run_config(recipe).accumulation
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = self.levers["cudnn_benchmark"]
        self.memory_format = torch.channels_last_3d if self.channels_last else torch.contiguous_format
        self.model = model.to(self.device, memory_format=self.memory_format)
        self.peak_lr = float(opt_cfg["lr"])
        self.optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=self.peak_lr,
            momentum=float(opt_cfg["momentum"]),
            nesterov=recipe_flag(opt_cfg["nesterov"], "optimizer.nesterov"),
            weight_decay=float(opt_cfg["weight_decay"]),
        )
        self.scaler = grad_scaler(self.device, self.precision)
        self.criterion = DiceCELoss()
        self.ddp = None
        if world_size > 1:
            self.ddp = distributed_model(self.model, self.device, static_graph=self.accumulation == 1)
        forward = self.ddp or self.model
        self.forward = torch.compile(forward, mode=self.compile_mode) if self.compile_mode else forward

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step on ``batch_per_gpu x accumulation`` patches on the device; returns the loss
        (the micro-steps' mean, detached, not synchronised)."""
        self.optimizer.zero_grad(set_to_none=True)
        images = images.contiguous(memory_format=self.memory_format)
        losses = []
        micro_batches = zip(
            images.tensor_split(self.accumulation), labels.tensor_split(self.accumulation), strict=True
        )
        for micro, (micro_images, micro_labels) in enumerate(micro_batches, start=1):
            # gradients are all-reduced once, in the last micro-step's backward
            syncing = self.ddp is None or micro == self.accumulation
            with contextlib.nullcontext() if syncing else self.ddp.no_sync():
                with autocast(self.device, self.precision):
                    logits = self.forward(micro_images)
                loss = self.criterion(logits, micro_labels) / self.accumulation
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
    """The recipe's training step on ``device`` (a new model unless ``model`` is given); DDP under several
    processes."""
    return TrainStep(build_model(recipe) if model is None else model, recipe, device, world_size).train()
