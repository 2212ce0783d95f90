"""The one training step of ResNet-50 (Gluon): loss, learning-rate schedule, trainer and the step
itself, which train.py (through engine.py) and the benchmark run."""

from __future__ import annotations

import math

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp as mx_amp
from zoo.errors import UserError


def learning_rate(step: int, *, base_lr: float, warmup_steps: int, total_steps: int, kind: str) -> float:
    """Linear warm-up from 0, then cosine (or linear) decay to 0 at ``total_steps``."""
    if warmup_steps and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if kind == "cosine":
        return 0.5 * base_lr * (1 + math.cos(math.pi * progress))
    if kind == "linear":
        return base_lr * (1 - progress)
    if kind == "constant":
        return base_lr
    raise UserError(f"unknown schedule kind {kind!r} (cosine, linear, constant)")


def smoothed_cross_entropy(F, logits, label, num_classes: int, smoothing: float):
    """Per-sample cross-entropy against one-hot labels smoothed by ``smoothing``."""
    off = smoothing / num_classes
    target = F.one_hot(label, num_classes, on_value=1.0 - smoothing + off, off_value=off)
    log_prob = F.log_softmax(logits.astype("float32"), axis=-1)
    return -F.sum(target * log_prob, axis=-1)


def build_trainer(net, recipe: dict, procs, amp: str, base_lr: float):
    """The recipe's optimizer over ``net`` (no weight decay on batch norm and biases), joined to the other
    devices and processes through ``procs`` (kvstore or Horovod), with AMP's loss scaler for fp16/bf16."""
    opt = recipe["optimizer"]
    params = net.collect_params()
    if opt.get("no_decay_bn_bias", True):
        for name, param in params.items():
            if name.endswith(("gamma", "beta", "bias")):
                param.wd_mult = 0.0
    options = {
        "learning_rate": base_lr,
        "momentum": opt.get("momentum", 0.9),
        "wd": opt.get("weight_decay", 1e-4),
    }
    name = opt.get("name", "sgd")  # any Gluon optimizer taking momentum: sgd, nag
    if procs.hvd is not None:
        trainer = procs.hvd.DistributedTrainer(params, name, options)
        procs.hvd.broadcast_parameters(params, root_rank=0)
    else:
        trainer = gluon.Trainer(params, name, options, kvstore=procs.kv, update_on_kvstore=False)
    if amp != "fp32":
        mx_amp.init_trainer(trainer)
    if procs.hvd is None and procs.kv is not None:
        # Create the kvstore and broadcast rank 0's weights now, and wait for the broadcast. Left to
        # the first step() (Gluon's default), a worker's broadcast pull of a key could be answered
        # after the first gradient push to that key had been merged, so that worker took the
        # gradient sum for its weights (fc.weight, the first gradient ready, on loaded machines).
        trainer._init_kvstore()
        trainer._init_params()
        mx.nd.waitall()
        procs.barrier()
    return trainer


def loss_scaler_state(trainer) -> dict | None:
    """The AMP loss scaler's state (saved with a checkpoint), or None without AMP."""
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if scaler is None:
        return None
    return {k: getattr(scaler, k) for k in ("_loss_scale", "_next_loss_scale", "_unskipped")}


def restore_loss_scaler(trainer, state: dict | None):
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if scaler is not None and state:
        for key, value in state.items():
            setattr(scaler, key, value)


class TrainStep:
    """``step(data, label, lr)``: forward, backward and update on one batch split over ``ctx`` at learning
    rate ``lr``; returns (loss sum, correct) as NDArrays on ``ctx[0]``, so that nothing here waits for the
    devices. Gradients are summed over devices and workers by the kvstore and normalised by ``step_batch``
    (the global batch; under Horovod the process's, as its allreduce averages)."""

    def __init__(self, net, trainer, ctx, *, num_classes: int, smoothing: float, amp: str, step_batch: int):
        self.net, self.trainer, self.ctx = net, trainer, ctx
        self.num_classes, self.smoothing, self.amp, self.step_batch = num_classes, smoothing, amp, step_batch

    def __call__(self, data, label, lr: float | None = None):
        if lr is not None:
            self.trainer.set_learning_rate(lr)
        datas = gluon.utils.split_and_load(data, self.ctx, even_split=False)
        labels = gluon.utils.split_and_load(label, self.ctx, even_split=False)
        with autograd.record():
            outputs = [self.net(x) for x in datas]
            losses = [
                smoothed_cross_entropy(mx.nd, o, y, self.num_classes, self.smoothing)
                for o, y in zip(outputs, labels, strict=True)
            ]
            if self.amp != "fp32":  # the scaling must be recorded too
                with mx_amp.scale_loss(losses, self.trainer) as scaled:
                    autograd.backward(scaled)
            else:
                autograd.backward(losses)
        self.trainer.step(self.step_batch)
        first = self.ctx[0]
        loss = mx.nd.add_n(*[v.sum().as_in_context(first) for v in losses])
        hits = mx.nd.add_n(
            *[
                (o.argmax(axis=1) == y.astype(o.dtype)).astype("float32").sum().as_in_context(first)
                for o, y in zip(outputs, labels, strict=True)
            ]
        )
        return loss, hits
