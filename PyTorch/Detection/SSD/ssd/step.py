"""SSD300's training step, built from a recipe: the one that ``ssd.train`` and ``ssd.benchmark`` run.

    step = TrainStep(recipe, device, num_classes=81, steps_per_epoch=len(loader))
    for batch in loader:
        loss = step(batch.images, batch.boxes, batch.labels)

A step is target matching on the device, forward and loss under autocast, backward (scaled for
fp16), the SGD update and the learning-rate schedule. A batch holds ``run.batch_per_gpu`` x
``run.accumulation`` images: with accumulation the step runs them as that many micro-batches and
sums their gradients before the update. The recipe keys that only change speed (the math stays the
same): ``channels_last``, ``compile`` with ``compile_mode`` (``reduce-overhead`` replays the forward
and backward as CUDA graphs), ``optimizer.fused`` (one fused SGD kernel on GPUs).
"""

from __future__ import annotations

import contextlib

import torch
from zoo.coco import learning_rate
from zoo.errors import UserError
from zoo.recipe import flag, run_config
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups

from ssd.boxes import default_boxes, match
from ssd.loss import SSDLoss
from ssd.model import SSD300

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def lr_schedule(recipe: dict, steps_per_epoch: int):
    """Linear warmup over ``schedule.warmup_steps``, then x``gamma`` at each epoch in ``milestones``."""
    s = recipe["schedule"]
    warmup = s.get("warmup_steps", 0)
    milestones = [m * steps_per_epoch for m in s.get("milestones", [])]
    gamma = s.get("gamma", 0.1)

    def factor(step: int) -> float:
        f = gamma ** sum(step >= m for m in milestones)
        if step < warmup:
            f *= (step + 1) / warmup
        return f

    return factor


class TrainStep:
    """Model, loss, optimizer, schedule and scaler of one run; calling it trains on one batch.

    ``model``: an SSD300 to train (weights already loaded), else a new one with ``num_classes``.
    The attributes ``model`` (the plain module, for checkpoints and evaluation), ``optimizer``,
    ``scheduler`` and ``scaler`` are what a checkpoint saves and restores.
    """

    def __init__(
        self,
        recipe: dict,
        device,
        *,
        steps_per_epoch: int,
        num_classes: int = 81,
        world_size: int = 1,
        model: SSD300 | None = None,
    ) -> None:
        device = torch.device(device)
        run = run_config(recipe)
        mode = recipe["compile_mode"]
        if mode not in COMPILE_MODES:
            raise UserError(f"compile_mode {mode!r} is not one of {', '.join(COMPILE_MODES)}")
        self.compiled = flag(recipe["compile"], "compile")
        mode = mode if self.compiled else None
        self.device = device
        self.amp = run.precision
        self.accumulation = run.accumulation
        self.channels_last = flag(recipe["channels_last"], "channels_last")
        self.cuda_graphs = mode == "reduce-overhead"
        model = (model if model is not None else SSD300(num_classes=num_classes)).to(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        o = recipe["optimizer"]
        self.optimizer = torch.optim.SGD(
            parameter_groups(model, o["weight_decay"]),
            lr=learning_rate(recipe, world_size),
            momentum=o["momentum"],
            fused=flag(o["fused"], "optimizer.fused") and device.type == "cuda",
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_schedule(recipe, steps_per_epoch)
        )
        self.scaler = grad_scaler(device, self.amp)
        self.criterion = SSDLoss(recipe["neg_pos_ratio"])
        self.dboxes = default_boxes().to(device)
        # Rank 0's BatchNorm statistics reach every rank each step, so every evaluation shard is
        # scored with (nearly) the weights and statistics the checkpoint holds.
        self.network = distributed_model(model, device, broadcast_buffers=True) if world_size > 1 else model
        self._forward_loss = (
            torch.compile(self._loss, mode=None if mode == "default" else mode) if mode else self._loss
        )

    def _loss(self, images: torch.Tensor, loc_target: torch.Tensor, cls_target: torch.Tensor) -> torch.Tensor:
        with autocast(self.device, self.amp):
            loc, logits = self.network(images)
        return self.criterion(loc, logits, loc_target, cls_target)

    def train(self) -> None:
        """Training mode (BatchNorm updates its statistics); evaluation may have switched it off."""
        self.model.train()

    def __call__(self, images: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One update on a batch on the device: ``images (B, 3, S, S)``, padded ``boxes (B, M, 4)``
        xyxy in [0, 1], ``labels (B, M)`` (0 = padding); B is the batch per GPU x the accumulation.
        Returns the loss (a device scalar, the mean over the micro-batches; with CUDA graphs it is
        valid until the next call)."""
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            loc_target, cls_target = match(boxes, labels, self.dboxes)
        self.optimizer.zero_grad(set_to_none=True)
        micro = zip(*(t.chunk(self.accumulation) for t in (images, loc_target, cls_target)), strict=True)
        total = None
        for k, (part_images, part_loc, part_cls) in enumerate(micro):
            # DDP reduces the summed gradients once, on the last micro-batch.
            last = k == self.accumulation - 1
            skip_sync = self.network is not self.model and not last
            with self.network.no_sync() if skip_sync else contextlib.nullcontext():
                if self.cuda_graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                loss = self._forward_loss(part_images, part_loc, part_cls) / self.accumulation
                self.scaler.scale(loss).backward()
            total = loss.detach() if total is None else total + loss.detach()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return total
