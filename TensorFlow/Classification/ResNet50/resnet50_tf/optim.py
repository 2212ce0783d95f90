"""Optimizers and learning-rate schedules of the recipes.

`MomentumSGD` is SGD with momentum in the PyTorch convention (v = m*v + g; w -= lr*v) with L2 weight
decay added to the gradient of the decayed variables only (kernels; never batch norm or biases).
With `lars_eta` set it becomes LARS (You et al., 2017): each decayed variable's step is scaled by the
trust ratio eta * ||w|| / (||g|| + wd * ||w||). Both run under keras.optimizers.LossScaleOptimizer,
which hands them unscaled gradients.
"""

from __future__ import annotations

import math

import keras
from keras import ops
from zoo.errors import UserError
from zoo.recipe import run_config

from resnet50_tf.model import is_decayed


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to peak_lr over warmup_steps, then cosine decay to end_lr at total_steps."""

    def __init__(self, peak_lr: float, warmup_steps: int, total_steps: int, end_lr: float = 0.0):
        self.peak_lr = float(peak_lr)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = max(int(total_steps), self.warmup_steps + 1)
        self.end_lr = float(end_lr)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warm = self.peak_lr * (step + 1.0) / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        progress = ops.clip(progress, 0.0, 1.0)
        cosine = self.end_lr + 0.5 * (self.peak_lr - self.end_lr) * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < self.warmup_steps, warm, cosine)

    def get_config(self):
        return {
            "peak_lr": self.peak_lr,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "end_lr": self.end_lr,
        }


class MomentumSGD(keras.optimizers.Optimizer):
    def __init__(
        self,
        learning_rate=0.1,
        momentum: float = 0.9,
        nesterov: bool = False,
        l2_decay: float = 0.0,
        lars_eta: float | None = None,
        name: str = "momentum_sgd",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.l2_decay = float(l2_decay)
        self.lars_eta = None if lars_eta is None else float(lars_eta)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = [self.add_variable_from_reference(v, "momentum") for v in variables]
        self._decayed = [is_decayed(v) for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        lr = ops.cast(learning_rate, variable.dtype)
        grad = ops.cast(gradient, variable.dtype)
        if self._decayed[index]:
            if self.l2_decay:
                grad = grad + self.l2_decay * variable
            if self.lars_eta is not None:
                w_norm = ops.sqrt(ops.sum(ops.square(variable)))
                g_norm = ops.sqrt(ops.sum(ops.square(grad)))
                trust = ops.where(
                    (w_norm > 0) & (g_norm > 0), self.lars_eta * w_norm / g_norm, ops.ones_like(w_norm)
                )
                grad = grad * trust
        m = self.momentums[index]
        self.assign(m, self.momentum * m + grad)
        step = grad + self.momentum * m if self.nesterov else m
        self.assign_sub(variable, lr * step)

    def get_config(self):
        config = super().get_config()
        config.update(
            momentum=self.momentum, nesterov=self.nesterov, l2_decay=self.l2_decay, lars_eta=self.lars_eta
        )
        return config


def peak_learning_rate(recipe: dict, global_batch: int) -> float:
    """The recipe's `lr_per_256` scaled linearly to the global batch."""
    return float(recipe["optimizer"]["lr_per_256"]) * global_batch / 256


def build_optimizer(recipe: dict, steps_per_epoch: int, global_batch: int, precision: str):
    """The recipe's optimizer with its schedule, the peak LR scaled linearly from `lr_per_256`."""
    opt = recipe["optimizer"]
    sched = recipe["schedule"]
    peak_lr = peak_learning_rate(recipe, global_batch)
    run = run_config(recipe)
    total = run.steps or run.epochs * steps_per_epoch
    warmup = int(round(float(sched.get("warmup_epochs", 0)) * steps_per_epoch))
    lr = WarmupCosine(peak_lr, warmup, total, float(sched.get("end_lr", 0.0)))
    name = opt.get("name", "sgd")
    if name not in ("sgd", "lars"):
        raise UserError(f"unknown optimizer {name!r} in the recipe (sgd or lars)")
    optimizer = MomentumSGD(
        learning_rate=lr,
        momentum=float(opt.get("momentum", 0.9)),
        nesterov=bool(opt.get("nesterov", False)),
        l2_decay=float(opt.get("weight_decay", 0.0)),
        lars_eta=float(opt.get("lars_eta", 0.001)) if name == "lars" else None,
    )
    if precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
