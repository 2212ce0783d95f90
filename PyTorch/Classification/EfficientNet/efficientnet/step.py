"""The training step of a recipe: what the engine runs, and what the benchmark times.

    step = build_train_step(recipe, device)           # model, optimizer, loss, EMA, compile, from the recipe
    loss = step(images, labels)                       # mixup/cutmix, forward (autocast), backward, update

One call is one optimizer step: ``accumulation`` micro-steps of ``run.batch_per_gpu`` images each,
gradients summed, one RMSProp (DeepLearningExamples' recipes) or SGD update, then the EMA of the
weights (``train.ema_decay``). Mixup and CutMix (``train.mixup``, ``train.cutmix``: Beta(alpha, alpha)
mixing, one of them per step when both are set) draw from a generator seeded by (seed, step), so a
resumed run mixes as an unbroken one. Every speed lever is a recipe key: ``train.compile``,
``train.channels_last``, ``train.cudnn_benchmark``, ``run.precision``, ``optimizer.fused``.

Two rules say how a recipe carries over to another number of GPUs, both recipe keys:
``optimizer.global_batch`` (null: the global batch is batch per GPU x ``run.accumulation`` x GPUs and
grows with them; a number: it stays that number, each GPU accumulating as many micro-steps as it takes)
and ``optimizer.lr_scaling`` (how the peak LR follows the global batch from ``optimizer.lr_per_256``).
"""

from __future__ import annotations

import contextlib
import copy
import math

import torch
import torch.nn as nn
from zoo.errors import UserError
from zoo.recipe import compile_mode, run_config
from zoo.recipe import flag as recipe_flag
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups

from efficientnet.model import EfficientNet, efficientnet

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


def build_model(recipe: dict) -> EfficientNet:
    """The recipe's EfficientNet (model.variant, model.wide_se, model.width, model.dropout,
    model.drop_path_rate, model.num_classes), random weights."""
    model_cfg = recipe["model"]
    return efficientnet(
        str(model_cfg["variant"]),
        num_classes=int(model_cfg["num_classes"]),
        wide_se=recipe_flag(model_cfg["wide_se"], "model.wide_se"),
        width=None if model_cfg["width"] is None else float(model_cfg["width"]),
        dropout=None if model_cfg["dropout"] is None else float(model_cfg["dropout"]),
        drop_path_rate=float(model_cfg["drop_path_rate"]),
    )


def build_optimizer(recipe: dict, model: nn.Module, peak_lr: float, fused: bool):
    """``optimizer.name``: rmsprop (DeepLearningExamples' EfficientNet recipes: TensorFlow's RMSProp
    constants alpha 0.9, eps 0.01, momentum 0.9) or sgd; weight decay spares BatchNorm and biases."""
    opt_cfg = recipe["optimizer"]
    groups = parameter_groups(model, float(opt_cfg["weight_decay"]))
    if opt_cfg["name"] == "rmsprop":
        return torch.optim.RMSprop(
            groups, lr=peak_lr, alpha=float(opt_cfg["alpha"]), eps=float(opt_cfg["eps"]),
            momentum=float(opt_cfg["momentum"]), foreach=True,
        )  # fmt: skip
    if opt_cfg["name"] == "sgd":
        return torch.optim.SGD(
            groups, lr=peak_lr, momentum=float(opt_cfg["momentum"]),
            nesterov=recipe_flag(opt_cfg["nesterov"], "optimizer.nesterov"), fused=fused,
        )  # fmt: skip
    raise UserError(f"optimizer.name must be rmsprop or sgd, not {opt_cfg['name']!r}")


class WeightAverage:
    """Exponential moving average of the weights (and a copy of the buffers), updated after each
    optimizer step: ``decay`` x average + (1 - decay) x weights. Evaluation scores it."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay, self.model = decay, copy.deepcopy(model).eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        averaged, current = list(self.model.parameters()), list(model.parameters())
        torch._foreach_lerp_(averaged, current, 1.0 - self.decay)
        for mine, theirs in zip(self.model.buffers(), model.buffers(), strict=True):
            mine.copy_(theirs)


def mix_batch(images, labels, num_classes: int, mixup: float, cutmix: float, generator, smoothing: float):
    """Mixup or CutMix (one, drawn per step when both alphas are set) of the batch with its reverse;
    returns the mixed images and the soft, label-smoothed targets."""
    targets = nn.functional.one_hot(labels, num_classes).float() * (1 - smoothing) + smoothing / num_classes
    alphas = [alpha for alpha in (mixup, cutmix) if alpha > 0]
    if not alphas:
        return images, targets
    use_cutmix = cutmix > 0 and (mixup == 0 or bool(torch.rand(1, generator=generator) < 0.5))
    alpha = cutmix if use_cutmix else mixup
    lam = _beta(alpha, generator)
    if use_cutmix:
        height, width = images.shape[-2:]
        cut_h, cut_w = int(height * math.sqrt(1 - lam)), int(width * math.sqrt(1 - lam))
        top = int(torch.randint(0, height - cut_h + 1, (1,), generator=generator))
        left = int(torch.randint(0, width - cut_w + 1, (1,), generator=generator))
        images = images.clone()
        images[..., top : top + cut_h, left : left + cut_w] = images.flip(0)[
            ..., top : top + cut_h, left : left + cut_w
        ]
        lam = 1 - cut_h * cut_w / (height * width)
    else:
        images = images * lam + images.flip(0) * (1 - lam)
    return images, targets * lam + targets.flip(0) * (1 - lam)


def _beta(alpha: float, generator) -> float:
    """A Beta(alpha, alpha) draw from ``generator`` (two Gamma draws through uniforms: reproducible)."""
    first, second = _gamma(alpha, generator), _gamma(alpha, generator)
    return first / (first + second)


def _gamma(alpha: float, generator) -> float:
    """Gamma(alpha, 1) by Marsaglia-Tsang (alpha < 1 boosted by U^(1/alpha)), from ``generator``."""
    boost = 1.0
    if alpha < 1:
        boost, alpha = float(torch.rand(1, generator=generator)) ** (1 / alpha), alpha + 1
    d = alpha - 1 / 3
    c = 1 / math.sqrt(9 * d)
    while True:
        x = float(torch.randn(1, generator=generator))
        v = (1 + c * x) ** 3
        u = float(torch.rand(1, generator=generator))
        if v > 0 and math.log(u) < 0.5 * x * x + d - d * v + d * math.log(v):
            return d * v * boost


class TrainStep:
    """One optimizer step: mixup/cutmix of the batch, ``accumulation`` micro-steps (forward under
    autocast, soft-target cross-entropy, backward, scaled for fp16), the optimizer, then the EMA.
    ``model`` is the plain module (its state_dict is the checkpoint's); ``forward`` is what runs it (DDP
    and ``torch.compile`` around ``model`` as the recipe and world size ask); ``average`` the EMA (or None)."""

    def __init__(self, model: nn.Module, recipe: dict, device, world_size: int = 1):
        train_cfg = recipe["train"]
        self.device = torch.device(device)
        self.levers = recipe_levers(recipe)
        self.precision, self.channels_last = self.levers["precision"], self.levers["channels_last"]
        self.compile_mode, self.fused_optimizer = self.levers["compile"], self.levers["fused_optimizer"]
        self.accumulation = accumulation(recipe, world_size)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = self.levers["cudnn_benchmark"]
        self.model = model.to(self.device)
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.peak_lr = peak_learning_rate(recipe, world_size)
        self.optimizer = build_optimizer(recipe, self.model, self.peak_lr, self.fused_optimizer)
        self.scaler = grad_scaler(self.device, self.precision)
        self.num_classes = int(recipe["model"]["num_classes"])
        self.smoothing = float(train_cfg["label_smoothing"])
        self.mixup, self.cutmix = float(train_cfg["mixup"]), float(train_cfg["cutmix"])
        self.seed, self.steps_done = run_config(recipe).seed, 0
        decay = train_cfg["ema_decay"]
        self.average = None if decay is None else WeightAverage(self.model, float(decay))
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
        # each process mixes its own images; the generator follows the step, so resume mixes the same
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.steps_done)
        images, targets = mix_batch(
            images, labels, self.num_classes, self.mixup, self.cutmix, generator, self.smoothing
        )
        losses = []
        micro_batches = zip(
            images.tensor_split(self.accumulation), targets.tensor_split(self.accumulation), strict=True
        )
        for micro, (micro_images, micro_targets) in enumerate(micro_batches, start=1):
            # gradients are all-reduced once, in the last micro-step's backward
            syncing = self.ddp is None or micro == self.accumulation
            with contextlib.nullcontext() if syncing else self.ddp.no_sync():
                with autocast(self.device, self.precision):
                    logits = self.forward(micro_images)
                loss = nn.functional.cross_entropy(logits.float(), micro_targets) / self.accumulation
                self.scaler.scale(loss).backward()
            losses.append(loss.detach())
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.average is not None:
            self.average.update(self.model)
        self.steps_done += 1
        return sum(losses)

    @property
    def eval_model(self) -> nn.Module:
        """The weights evaluation scores: the EMA where the recipe keeps one, else the model."""
        return self.model if self.average is None else self.average.model

    def train(self) -> TrainStep:
        self.forward.train()
        return self


def build_train_step(
    recipe: dict, device, *, world_size: int = 1, model: nn.Module | None = None
) -> TrainStep:
    """The recipe's training step on ``device`` (a new model from the recipe unless ``model`` is given,
    e.g. with pretrained weights already loaded). Under several processes the model is DDP-wrapped."""
    return TrainStep(build_model(recipe) if model is None else model, recipe, device, world_size).train()
