"""The RNN-T's one training step, what train.py, engine.py and the benchmark run: log-mel features and
SpecAugment on the device, the transducer loss over the joint network's lattice, LAMB with the MLPerf
schedule (linear warm-up, hold, exponential decay per epoch, a floor), gradient accumulation, mixed
precision and an exponential moving average of the weights (what evaluation scores).

    step = TrainStep(model, recipe, device, world_size=env.world_size, steps_per_epoch=n)
    loss, utterances, audio_seconds = step(micro_batches)   # one update over run.accumulation batches
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn
from zoo.errors import UserError

from rnnt import DEFAULT_RECIPE, MODEL_DIR  # noqa: F401 (step.DEFAULT_RECIPE, as before)
from rnnt.features import LogMelFeatures
from rnnt.lamb import Lamb
from rnnt.loss import rnnt_loss


def mlperf_schedule(opt_cfg: dict, steps_per_epoch: int):
    """The learning-rate factor at optimizer step ``step`` (0-based), the reference's lr_policy: linear
    warm-up over ``warmup_epochs``, the peak for ``hold_epochs``, then ``exp_gamma`` per epoch after
    them, never below ``min_lr``."""
    lr, min_lr, gamma = float(opt_cfg["lr"]), float(opt_cfg["min_lr"]), float(opt_cfg["exp_gamma"])
    warmup = float(opt_cfg["warmup_epochs"]) * steps_per_epoch
    hold = float(opt_cfg["hold_epochs"]) * steps_per_epoch

    def factor(step: int) -> float:
        if step < warmup:
            scale = (step + 1) / (warmup + 1)
        elif step < warmup + hold:
            scale = 1.0
        else:
            epoch = step // steps_per_epoch + 1
            scale = gamma ** (epoch - float(opt_cfg["warmup_epochs"]) - float(opt_cfg["hold_epochs"]))
        return max(scale * lr, min_lr) / lr

    return factor


class TransducerLoss(nn.Module):
    """The model and its loss as one module (what DDP wraps): mean over utterances of -log p(y | x)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, feats, feat_lengths, labels, label_lengths):
        logits, enc_lengths = self.model(feats, feat_lengths, labels)
        return rnnt_loss(logits, labels, enc_lengths, label_lengths, self.model.blank).mean()


class TrainStep:
    """One optimizer update over a list of host micro-batches ``(audio, audio_lengths, labels,
    label_lengths)`` (run.accumulation of them): features and SpecAugment (``augment:``) on the device,
    the loss under autocast, backward (DDP syncs on the last micro-batch), LAMB, the schedule, the EMA."""

    def __init__(self, model: nn.Module, recipe: dict, device, world_size: int = 1, steps_per_epoch: int = 1):
        from zoo.recipe import run_config
        from zoo.torch import distributed_model, grad_scaler

        run, opt_cfg = run_config(recipe), recipe["optimizer"]
        self.model, self.device, self.amp = model, torch.device(device), run.precision
        self.features = LogMelFeatures(recipe["features"]).to(self.device)
        self.augment = recipe["augment"] if recipe["augment"]["enabled"] else None
        self.optimizer = Lamb(
            model.parameters(),
            lr=float(opt_cfg["lr"]),
            betas=tuple(opt_cfg["betas"]),
            eps=float(opt_cfg["eps"]),
            weight_decay=float(opt_cfg["weight_decay"]),
            max_grad_norm=float(opt_cfg["clip_norm"]),
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, mlperf_schedule(opt_cfg, steps_per_epoch)
        )
        self.scaler = grad_scaler(self.device, run.precision)
        self.ema_decay = float(opt_cfg["ema"])
        if not 0.0 <= self.ema_decay < 1.0:
            raise UserError(f"optimizer.ema must be in [0, 1), not {self.ema_decay}")
        self.ema = [p.detach().clone().float() for p in model.parameters()]
        net = TransducerLoss(model)
        self.net = (
            distributed_model(net, self.device, static_graph=run.accumulation == 1) if world_size > 1 else net
        )

    def __call__(self, batches: list) -> tuple[torch.Tensor, int, float]:
        """(mean loss of the update, 0-dim on the device; utterances; audio seconds) of this rank."""
        from zoo.torch import autocast

        total = torch.zeros((), device=self.device)
        utterances, samples = 0, 0
        for index, (audio, audio_lengths, labels, label_lengths) in enumerate(batches):
            audio, audio_lengths = audio.to(self.device, non_blocking=True), audio_lengths.to(self.device)
            labels, label_lengths = labels.to(self.device), label_lengths.to(self.device)
            with torch.no_grad():
                feats, feat_lengths = self.features(audio, audio_lengths, self.augment)
            syncing = index == len(batches) - 1 or not hasattr(self.net, "no_sync")
            with contextlib.nullcontext() if syncing else self.net.no_sync():
                with autocast(self.device, self.amp):
                    loss = self.net(feats, feat_lengths, labels, label_lengths) / len(batches)
                self.scaler.scale(loss).backward()
            total += loss.detach()
            utterances += len(audio_lengths)
            samples += int(audio_lengths.sum())
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.update_ema()
        return total, utterances, samples / self.features.sample_rate

    @torch.no_grad()
    def update_ema(self) -> None:
        params = [p.detach().float() for p in self.model.parameters()]
        if self.ema_decay == 0.0:
            torch._foreach_copy_(self.ema, params)
        else:
            torch._foreach_lerp_(self.ema, params, 1.0 - self.ema_decay)

    def ema_model(self) -> nn.Module:
        """A copy of the model holding the averaged weights (in eval mode): what evaluation scores."""
        averaged = copy.deepcopy(self.model)
        with torch.no_grad():
            for param, value in zip(averaged.parameters(), self.ema, strict=True):
                param.copy_(value)
        return averaged.eval()

    def train(self) -> TrainStep:
        self.net.train()
        self.features.train()
        return self

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "ema": [t.cpu() for t in self.ema],
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: dict, source) -> None:
        """Continue from ``state`` (a training checkpoint's fields); ``source`` names it in an error."""
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as e:
            reason = str(e).strip().splitlines()[-1][:200]
            raise UserError(f"{source} does not fit the recipe's model: {reason}") from None
        self.ema = [t.to(self.device) for t in state["ema"]]
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
