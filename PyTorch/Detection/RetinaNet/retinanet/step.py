"""RetinaNet's training step, built from a recipe: the one that ``retinanet.train`` and
``retinanet.benchmark`` run.

    step = TrainStep(recipe, device, num_classes=264, steps_per_epoch=len(loader))
    for batch in loader:
        loss = step(batch.images, batch.boxes, batch.labels)

A step is the forward under autocast, anchor matching and the focal and L1 losses on the whole batch on
the device (retinanet.loss: no wait for the host), backward (scaled for fp16), the Adam update and the
warm-up schedule. A batch holds ``run.batch_per_gpu`` x ``run.accumulation`` images; with accumulation
they run as that many micro-batches whose gradients add up before the update. Speed levers (same math):
``channels_last``, ``compile`` with ``compile_mode`` (``reduce-overhead``: CUDA graphs on the fixed
image size), ``optimizer.fused``.
"""

from __future__ import annotations

import contextlib

import torch
from zoo.coco import learning_rate
from zoo.errors import UserError
from zoo.recipe import flag, run_config
from zoo.torch import autocast, distributed_model, grad_scaler

from retinanet.loss import retinanet_loss
from retinanet.model import RetinaNet

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def warmup_schedule(recipe: dict, steps_per_epoch: int):
    """MLPerf's warm-up: the LR factor rises linearly from ``schedule.warmup_factor`` to 1 over
    ``schedule.warmup_epochs`` epochs, one step at a time, then stays at 1."""
    s = recipe["schedule"]
    steps = s["warmup_epochs"] * steps_per_epoch
    start = s["warmup_factor"]

    def factor(step: int) -> float:
        if step >= steps:
            return 1.0
        alpha = step / steps
        return start * (1 - alpha) + alpha

    return factor


class TrainStep:
    """Model, optimizer, schedule and scaler of one run; calling it trains on one batch.

    ``model``: a RetinaNet to train (weights already loaded), else a new one of the recipe's ``model:``
    with ``num_classes``. ``model`` (the plain module), ``optimizer``, ``scheduler`` and ``scaler``
    are what a checkpoint saves and restores.
    """

    def __init__(self, recipe: dict, device, *, steps_per_epoch: int, num_classes: int, world_size: int = 1,
                 model: RetinaNet | None = None) -> None:  # fmt: skip
        device = torch.device(device)
        run = run_config(recipe)
        mode = recipe["compile_mode"]
        if mode not in COMPILE_MODES:
            raise UserError(f"compile_mode {mode!r} is not one of {', '.join(COMPILE_MODES)}")
        mode = mode if flag(recipe["compile"], "compile") else None
        self.device, self.amp, self.accumulation = device, run.precision, run.accumulation
        self.channels_last = flag(recipe["channels_last"], "channels_last")
        self.cuda_graphs = mode == "reduce-overhead"
        model = (model if model is not None else RetinaNet(num_classes, recipe["model"])).to(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        o = recipe["optimizer"]
        self.optimizer = torch.optim.Adam(
            [p for p in model.parameters() if p.requires_grad],
            lr=learning_rate(recipe, world_size),
            weight_decay=o["weight_decay"],
            fused=flag(o["fused"], "optimizer.fused") and device.type == "cuda",
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, warmup_schedule(recipe, steps_per_epoch)
        )
        self.scaler = grad_scaler(device, self.amp)
        size = recipe["data"]["image_size"]
        self.anchors = torch.cat(model.anchors((size, size), device))
        self.focal = (recipe["loss"]["focal_alpha"], recipe["loss"]["focal_gamma"])
        self.network = distributed_model(model, device) if world_size > 1 else model
        self._forward_loss = (
            torch.compile(self._loss, mode=None if mode == "default" else mode) if mode else self._loss
        )

    def _loss(self, images: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with autocast(self.device, self.amp):
            logits, deltas = self.network(images)
        alpha, gamma = self.focal
        classification, regression = retinanet_loss(
            logits, deltas, self.anchors, boxes, labels, alpha=alpha, gamma=gamma
        )
        return classification + regression

    def train(self) -> None:
        """Training mode (the trunk's BatchNorm is frozen either way)."""
        self.model.train()

    def __call__(self, images: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One update on a batch on the device: ``images (B, 3, S, S)``, padded ``boxes (B, M, 4)`` xyxy in
        pixels, ``labels (B, M)`` (-1 = padding); B is the batch per GPU x the accumulation. Returns the
        loss (a device scalar, the mean over the micro-batches)."""
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        self.optimizer.zero_grad(set_to_none=True)
        micro = zip(*(t.chunk(self.accumulation) for t in (images, boxes, labels)), strict=True)
        total = None
        for k, (part_images, part_boxes, part_labels) in enumerate(micro):
            # DDP reduces the summed gradients once, on the last micro-batch.
            skip_sync = self.network is not self.model and k < self.accumulation - 1
            with self.network.no_sync() if skip_sync else contextlib.nullcontext():
                if self.cuda_graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                loss = self._forward_loss(part_images, part_boxes, part_labels) / self.accumulation
                self.scaler.scale(loss).backward()
            total = loss.detach() if total is None else total + loss.detach()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return total
