"""The Transformer's one training step, what train.py, engine.py and the benchmark all run:
label-smoothed cross entropy over the teacher-forced logits (one module, so DDP wraps and
``torch.compile`` compiles model and loss together), Adam with inverse-square-root warm-up, gradient
accumulation, mixed precision.

    step = TrainStep(model, recipe, device, world_size=env.world_size)
    loss, log_perplexity, tokens = step(batches)      # one update over run.accumulation batches
"""

from __future__ import annotations

import contextlib
import math

import torch
import zoo.recipe
from torch import nn
from zoo.errors import UserError

from transformer import DEFAULT_RECIPE, MODEL_DIR  # noqa: F401 (step.DEFAULT_RECIPE, as before)
from transformer.model import PAD

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
# The modes that replay CUDA graphs: on an H200 their backward overwrote a graph output still needed
# (the gradient of the embedding the encoder, the decoder and the output projection share).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def inverse_sqrt(warmup_steps: int):
    """The learning-rate factor at update ``step``: linear warm-up, then 1/sqrt(step) (peak 1.0)."""

    def factor(step: int) -> float:
        step = max(step, 1)
        if warmup_steps <= 0:
            return 1.0 / math.sqrt(step)
        return min(step / warmup_steps, math.sqrt(warmup_steps / step))

    return factor


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> tuple:
    """(summed label-smoothed cross entropy, summed plain NLL) over the non-pad target tokens.

    The loss of ``F.cross_entropy(..., ignore_index=PAD, label_smoothing=smoothing, reduction="sum")``,
    from one fp32 log-softmax that also gives the NLL (which carries no gradient); no host sync.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    real = target != PAD
    loss = torch.where(real, (1.0 - smoothing) * nll + smoothing * uniform, 0.0).sum()
    return loss, torch.where(real, nll.detach(), 0.0).sum()


class TranslationLoss(nn.Module):
    """The model and its training loss as one module: what DDP wraps, ``torch.compile`` compiles (one
    graph, so the fp32 loss over the vocabulary fuses with the logits) and :func:`train_step` calls.

    ``forward(src, tgt_in, tgt_out)`` -> :func:`smoothed_loss` of the teacher-forced logits.
    """

    def __init__(self, model: nn.Module, smoothing: float):
        super().__init__()
        self.model = model
        self.smoothing = smoothing

    def forward(self, src, tgt_in, tgt_out):
        return smoothed_loss(self.model(src, tgt_in), tgt_out, self.smoothing)


def compile_mode(value) -> str | None:
    """``train.compile`` as a ``torch.compile`` mode (zoo.recipe.compile_mode), without the CUDA-graph modes."""
    if value in CUDA_GRAPH_MODES:
        raise UserError(
            f"train.compile {value} replays CUDA graphs, which fail on this model's shared embedding "
            "gradient; use default or max-autotune-no-cudagraphs"
        )
    return zoo.recipe.compile_mode(value, modes=COMPILE_MODES)


def build_optimizer(model: nn.Module, opt_cfg: dict):
    """Adam with the recipe's settings; ``optimizer.fused`` runs its update as one fused kernel."""
    from zoo.torch import parameter_groups

    return torch.optim.Adam(
        parameter_groups(model, opt_cfg["weight_decay"]),
        lr=opt_cfg["lr"],
        betas=tuple(opt_cfg["betas"]),
        eps=opt_cfg["eps"],
        fused=zoo.recipe.flag(opt_cfg["fused"], "optimizer.fused"),
    )


def training_net(model: nn.Module, recipe: dict, device, distributed: bool = False) -> nn.Module:
    """What :func:`train_step` runs: :class:`TranslationLoss` around ``model`` (label smoothing from
    ``train.label_smoothing``), under DDP when ``distributed``, compiled as ``train.compile`` says.

    Token-count batches change shape every step: torch.compile compiles the first shape, recompiles
    with the dimensions that changed made dynamic (once, when the second batch changes all three),
    and then reuses that graph (lengths are multiples of ``data.LENGTH_MULTIPLE``, so inductor's
    alignment guard holds; a small last batch of an epoch may add one more graph).
    """
    from zoo.torch import distributed_model

    train_cfg = recipe["train"]
    mode = compile_mode(train_cfg["compile"])
    net = TranslationLoss(model, float(train_cfg["label_smoothing"]))
    if distributed:
        net = distributed_model(net, device)
    return torch.compile(net, mode=mode) if mode else net


def batch_to(batch: dict, device) -> dict:
    """The batch's tensors on ``device``; from pinned memory on a GPU, so the copy does not block the host."""
    device = torch.device(device)
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def train_step(
    net,
    batches: list,
    optimizer,
    scheduler,
    scaler,
    *,
    device,
    amp: str,
    clip_norm: float,
):
    """One update over ``batches`` (host tensors; gradient accumulation: one backward each, one
    optimizer step). ``net`` is what :func:`training_net` returns.

    The loss is normalised by the update's target tokens (counted on the host). Returns (loss per token,
    nll per token) as 0-dim tensors on ``device`` and the tokens: reading the tensors waits for the GPU,
    so a caller reads them only when it logs.
    """
    from zoo.torch import autocast

    tokens = sum(int((b["tgt_out"] != PAD).sum()) for b in batches)
    total_loss = total_nll = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        batch = batch_to(batch, device)
        # Only the last micro-batch all-reduces gradients.
        sync = i == len(batches) - 1 or not hasattr(net, "no_sync")
        with net.no_sync() if not sync else contextlib.nullcontext():
            with autocast(device, amp):
                loss, nll = net(batch["src"], batch["tgt_in"], batch["tgt_out"])
            scaler.scale(loss / tokens).backward()
        total_loss = total_loss + loss.detach()
        total_nll = total_nll + nll
    if clip_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return total_loss / tokens, total_nll / tokens, tokens


class TrainStep:
    """The recipe's training step around ``model``: :func:`training_net` (DDP over ``world_size`` > 1
    processes, compiled as ``train.compile`` says), Adam (:func:`build_optimizer`), the inverse
    square-root schedule and the grad scaler of ``run.precision`` (scaling for fp16 only).

    ``step(batches)`` is :func:`train_step`: one update over a list of host batches (one per micro-step
    of ``run.accumulation``); ``state_dict()`` / ``load_state_dict()`` carry what a resumed run needs.
    """

    def __init__(self, model: nn.Module, recipe: dict, device, world_size: int = 1):
        from zoo.recipe import run_config
        from zoo.torch import grad_scaler

        run, opt_cfg = run_config(recipe), recipe["optimizer"]
        self.model, self.device, self.amp = model, torch.device(device), run.precision
        self.clip_norm = float(opt_cfg["clip_norm"])
        self.optimizer = build_optimizer(model, opt_cfg)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, inverse_sqrt(opt_cfg["warmup_steps"])
        )
        self.scaler = grad_scaler(device, run.precision)
        self.net = training_net(model, recipe, device, distributed=world_size > 1)

    def __call__(self, batches: list) -> tuple:
        """(loss per target token, NLL per target token, target tokens) of one update over ``batches``."""
        return train_step(
            self.net,
            batches,
            self.optimizer,
            self.scheduler,
            self.scaler,
            device=self.device,
            amp=self.amp,
            clip_norm=self.clip_norm,
        )

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: dict, source) -> None:
        """Continue from ``state`` (a training checkpoint's fields); ``source`` names it in an error."""
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as e:  # its last line names the first mismatched weight
            reason = str(e).strip().splitlines()[-1][:200]
            raise UserError(f"{source} does not fit the recipe's model: {reason}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
