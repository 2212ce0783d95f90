"""GPT's one training step, what train.py, engine.py and the benchmark all run: next-token cross entropy
(fp32 over the vocabulary), AdamW (fused on a GPU) with linear warm-up and cosine decay, gradient clipping
over every shard, gradient accumulation, mixed precision (bf16 parameters under FSDP2, autocast
otherwise), on the parallel layout of gpt.parallel.

    step = TrainStep(recipe, device, layout)          # builds the model, spreads it, the optimizer
    loss, grad_norm, tokens = step(micro_batches)     # one update over run.accumulation micro-batches
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
import zoo.recipe
from zoo.errors import UserError

from gpt import DEFAULT_RECIPE, MODEL_DIR  # noqa: F401 (step.DEFAULT_RECIPE, as before)
from gpt.model import GPT, build_model, init_parameters
from gpt.parallel import Layout, clip_grads, parallel_settings, parallelize, uses_fsdp_precision


def warmup_cosine(warmup_steps: int, decay_steps: int, min_ratio: float):
    """The learning-rate factor at update ``step``: linear warm-up to 1, cosine decay to ``min_ratio``
    at ``warmup_steps + decay_steps``, then ``min_ratio``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, decay_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def next_token_loss(model, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of ``model``'s predictions of tokens[:, 1:] from tokens[:, :-1] (fp32)."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def build_optimizer(model: GPT, opt_cfg: dict, device, layout: Layout):
    """AdamW: weights decayed, biases and norms not (zoo.torch.parameter_groups); ``optimizer.fused`` one
    kernel per update on a GPU. Under tensor parallelism without FSDP, parameters are DTensors and plain
    tensors side by side, which the multi-tensor kernels cannot mix: the update runs per parameter."""
    from zoo.torch import parameter_groups

    fused = zoo.recipe.flag(opt_cfg["fused"], "optimizer.fused")
    mixed = layout.tp > 1
    return torch.optim.AdamW(
        parameter_groups(model, opt_cfg["weight_decay"]),
        lr=opt_cfg["lr"],
        betas=tuple(opt_cfg["betas"]),
        eps=opt_cfg["eps"],
        fused=(fused and not mixed) or None,
        foreach=False if mixed else None,
    )


def batch_to(array: np.ndarray, device) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


class TrainStep:
    """The recipe's model and its update: built (seeded by ``run.seed``), spread over ``layout``
    (gpt.parallel), AdamW and the warm-up + cosine schedule of ``optimizer:``.

    ``step(micro_batches)`` (host int64 arrays of (batch, seq_len + 1) tokens, one per micro-step) runs
    one optimizer update and returns (mean loss of this rank, gradient norm before clipping, tokens) as
    0-dim tensors on the device and an int: reading a tensor waits for the device, so a caller reads
    them only when it logs. ``state_dicts()`` / ``load_state_dicts()`` are the sharded model and
    optimizer states (torch.distributed.checkpoint.state_dict); ``scheduler`` goes beside them.
    """

    def __init__(self, recipe: dict, device, layout: Layout, *, seed: int | None = None):
        from zoo.recipe import run_config
        from zoo.torch import grad_scaler, seed_everything

        run, opt_cfg = run_config(recipe), recipe["optimizer"]
        self.device, self.layout, self.amp = torch.device(device), layout, run.precision
        settings = parallel_settings(recipe["parallel"])
        seed = run.seed if seed is None else seed
        seed_everything(seed)
        # Built on the meta device, spread, then materialised: each rank allocates only its shards and
        # draws them from the same whole tensors (gpt.model.init_parameters), whatever the layout.
        self.model = build_model(recipe["model"], "meta")
        parallelize(self.model, settings, layout, run.precision)
        self.model.to_empty(device=device)
        init_parameters(self.model, seed)
        self.autocast = not uses_fsdp_precision(layout, run.precision)
        self.clip_norm = float(opt_cfg["clip_norm"])
        self.optimizer = build_optimizer(self.model, opt_cfg, device, layout)
        schedule = warmup_cosine(opt_cfg["warmup_steps"], opt_cfg["decay_steps"], opt_cfg["min_lr_ratio"])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.scaler = grad_scaler(device, run.precision)
        if run.precision == "fp16" and layout.world > 1:
            raise UserError(
                "run.precision fp16 runs on one process; use bf16 (fp32 master weights) on several"
            )

    def __call__(self, micro_batches: list) -> tuple:
        from zoo.torch import autocast

        total = torch.zeros((), device=self.device)
        tokens = 0
        for i, array in enumerate(micro_batches):
            batch = batch_to(array, self.device)
            if hasattr(self.model, "set_requires_gradient_sync"):
                # FSDP2: reduce-scatter gradients only after the last micro-batch.
                self.model.set_requires_gradient_sync(i == len(micro_batches) - 1)
            if self.autocast:
                with autocast(self.device, self.amp):
                    loss = next_token_loss(self.model, batch)
            else:
                loss = next_token_loss(self.model, batch)
            self.scaler.scale(loss / len(micro_batches)).backward()
            total = total + loss.detach()
            tokens += batch.shape[0] * (batch.shape[1] - 1)
        self.scaler.unscale_(self.optimizer)
        grad_norm = clip_grads(self.model.parameters(), self.clip_norm if self.clip_norm > 0 else math.inf)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return total / len(micro_batches), grad_norm, tokens

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def state_dicts(self) -> dict:
        """{"model", "optimizer"}: this rank's shards, keyed by the unsharded names (any layout reads them)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optimizer": optimizer}

    def load_state_dicts(self, sharded: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=sharded["model"],
            optim_state_dict=sharded["optimizer"],
        )
