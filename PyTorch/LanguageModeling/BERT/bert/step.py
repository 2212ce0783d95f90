"""The training step of a recipe: what ``bert.engine`` runs for pretraining and SQuAD fine-tuning, and what
``benchmark.py`` times as "ours" (its throughput mode and the scaling mode of ``benchmark.sh --gpus``).

    model = build_model(recipe, vocab_size, nsp=False).to(device)
    step = pretraining_step(model, recipe, device)       # LAMB, schedule, precision, compile, graphs
    losses, sequences = step(micro_batches)              # run.accumulation micro-batches, one LAMB step

Every speed lever is a recipe key: ``run.precision``; ``weights`` (fp32, or bf16: bf16 parameters with fp32
master weights and fp32 gradient sums in LAMB); ``compile`` (false, true or a ``torch.compile`` mode:
``reduce-overhead`` adds CUDA graphs); ``optimizer.implementation`` (auto = the Triton kernels on a GPU;
foreach, fused_adam, compiled, per_tensor); ``run.batch_per_gpu``; ``run.accumulation``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from zoo.errors import UserError
from zoo.recipe import compile_mode, run_config
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups, seed_everything

from bert import DEFAULT_RECIPE, SQUAD_RECIPE, convert  # noqa: F401 (step.DEFAULT_RECIPE, as before)
from bert.lamb import Lamb, lamb_implementation, warmup_poly_schedule
from bert.model import BertForPreTraining, bert_config, pretraining_loss


def compile_mode_of(value) -> str | None:
    """The recipe's `compile`: false/None (eager), true (default mode) or a torch.compile mode name."""
    return compile_mode(value, key="compile")


def uses_bf16_weights(recipe: dict, world_size: int = 1, is_primary: bool = True) -> bool:
    """The recipe's `weights`: fp32 (default) or bf16 (bf16 parameters, fp32 master weights and fp32
    gradient sums in LAMB). bf16 needs bf16 autocast; several processes use fp32 (DDP would all-reduce
    bf16 gradients of the last micro-step only) with a notice."""
    value, precision = recipe["weights"], run_config(recipe).precision
    if value not in ("fp32", "bf16"):
        raise UserError(f"weights: {value!r} is not fp32 or bf16")
    if value == "bf16" and precision != "bf16":
        raise UserError(f"weights: bf16 needs run.precision: bf16 (the recipe has {precision})")
    if value == "bf16" and world_size > 1:
        if is_primary:
            print("weights: bf16 is for one process; using fp32 weights")
        return False
    return value == "bf16"


def build_model(
    recipe: dict, vocab_size: int, nsp: bool, init_state: dict | None = None
) -> BertForPreTraining:
    """The recipe's model, seeded from the recipe; ``init_state`` (any layout bert.convert reads) loaded.
    Without next-sentence labels the pooler and NSP head stay as they are, out of the optimizer."""
    seed_everything(run_config(recipe).seed)
    model = BertForPreTraining(bert_config(recipe["model"], vocab_size=vocab_size))
    if init_state is not None:
        convert.load_into(model, init_state)
    if not nsp:
        model.bert.pooler.requires_grad_(False)
        model.nsp.requires_grad_(False)
    return model


def pretraining_losses(model, batch: dict, device, precision: str, nsp: bool) -> dict:
    """{"loss": total, "loss_mlm": masked-LM part} of one micro-batch under the recipe's autocast."""
    with autocast(device, precision):
        mlm_logits, nsp_logits = model(
            batch["input_ids"],
            batch["token_type_ids"],
            seq_ids=batch.get("seq_ids"),
            mlm_positions=batch["mlm_positions"],
            cls_positions=batch.get("cls_positions"),
            next_sentence=nsp,
        )
    loss, mlm = pretraining_loss(mlm_logits, batch["mlm_labels"], nsp_logits, batch.get("nsp_labels"))
    return {"loss": loss, "loss_mlm": mlm}


def squad_losses(model, batch: dict, device, precision: str) -> dict:
    """{"loss": mean of the start and end cross-entropies} of one batch of SQuAD windows."""
    with autocast(device, precision):
        start, end = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    loss = (
        F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])
    ) / 2
    return {"loss": loss}


def full_precision_state(model, optimizer) -> dict:
    """The model's state dict in fp32: each trained parameter's fp32 master where the optimizer
    keeps one (weights: bf16), every other floating-point tensor converted."""
    state = model.state_dict()
    masters = {name: optimizer.state.get(p, {}).get("master") for name, p in model.named_parameters()}
    for name, value in state.items():
        if masters.get(name) is not None:
            state[name] = masters[name]
        elif value.is_floating_point():
            state[name] = value.float()
    return state


class TrainStep:
    """One optimizer step of a recipe over ``run.accumulation`` micro-batches: the loss function's
    ``"loss"`` back-propagated under the grad scaler (DDP's gradient sync only on the last micro-step),
    optional gradient-norm clipping, the optimizer and schedule steps. Built by :func:`pretraining_step`
    and :func:`squad_step` around ``model`` (fp32, on its device).

    ``resume_state`` (model, optimizer, scheduler, scaler, step) is restored before the model is
    converted to bf16 (master weights come from the fp32 weights). ``step_count`` is the number of
    optimizer steps taken; dropout is re-seeded from (seed, step, rank) at each step, so a resumed run
    repeats the unbroken one exactly.
    """

    def __init__(
        self, model, optimizer, schedule, losses: Callable[..., dict], recipe: dict, device, *,
        clip_norm: float | None = None, compile_mode: str | None = None, bf16_weights: bool = False,
        static_graph: bool = True, rank: int = 0, world_size: int = 1, resume_state: dict | None = None,
    ):  # fmt: skip
        self.model, self.optimizer, self.schedule, self.losses = model, optimizer, schedule, losses
        self.recipe, self.run, self.device = recipe, run_config(recipe), device
        self.clip_norm, self.bf16_weights = clip_norm, bf16_weights
        self.rank, self.world_size = rank, world_size
        self.scaler = grad_scaler(device, self.run.precision)
        self.step_count = 0
        if resume_state is not None:
            model.load_state_dict(resume_state["model"])
            optimizer.load_state_dict(resume_state["optimizer"])
            schedule.load_state_dict(resume_state["scheduler"])
            if resume_state["scaler"]:  # saved by an fp16 run
                self.scaler.load_state_dict(resume_state["scaler"])
            self.step_count = int(resume_state["step"])
        if bf16_weights:
            model.to(torch.bfloat16)
        train_model = distributed_model(model, device, static_graph=static_graph) if world_size > 1 else model
        self.compile_mode = compile_mode
        self.train_model = torch.compile(train_model, mode=compile_mode) if compile_mode else train_model
        # With CUDA graphs the backward graph's outputs live in the graph pool and the next replay
        # overwrites them: after the first backward, each gradient is copied into a buffer of our own,
        # which later micro-steps accumulate into and zero_grad zeroes instead of freeing.
        self.graphs = compile_mode == "reduce-overhead"
        self._own_grads = not self.graphs or bf16_weights  # bf16 weights: gradients go to LAMB's sums

    @property
    def lr(self) -> float:
        return self.schedule.get_last_lr()[0]

    def __call__(self, micro_batches: Iterator[dict]) -> tuple[dict, int]:
        """One optimizer step over the next ``run.accumulation`` micro-batches of ``micro_batches`` (dicts of
        CPU or device tensors; ``sequences``, the real sequences in it, stays on the host). Returns the
        losses as device scalars averaged over the micro-batches, and the number of sequences trained on."""
        accumulation = self.run.accumulation
        torch.manual_seed(
            self.run.seed * 1_000_003 + self.step_count * 1009 + self.rank
        )  # dropout: exact on resume
        sums, sequences = {}, 0
        for micro in range(accumulation):
            batch = next(micro_batches)
            sequences += int(batch["sequences"])  # a host count: no wait for the device
            batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items() if k != "sequences"}
            if self.graphs:
                torch.compiler.cudagraph_mark_step_begin()
            # gradients are all-reduced once, on the last micro-step
            last = micro == accumulation - 1
            syncs = last or self.world_size == 1 or not hasattr(self.train_model, "no_sync")
            with contextlib.nullcontext() if syncs else self.train_model.no_sync():
                losses = self.losses(self.train_model, batch, self.device, self.run.precision)
                self.scaler.scale(losses["loss"] / accumulation).backward()
            if self.bf16_weights:
                self.optimizer.accumulate_grads()
            if not self._own_grads:
                for p in self.model.parameters():
                    if p.grad is not None:
                        p.grad = p.grad.clone()
                self._own_grads = True
            for name, value in losses.items():
                sums[name] = sums.get(name, 0) + value.detach() / accumulation
        self.scaler.unscale_(self.optimizer)
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=not self.graphs)
        self.schedule.step()
        self.step_count += 1
        return sums, sequences

    def training_state(self) -> dict:
        """The step's part of a training checkpoint (zoo.torch.TRAINING_STATE_FIELDS): fp32 weights,
        optimizer, scheduler, scaler and the optimizer steps taken."""
        return {
            "model": full_precision_state(self.model, self.optimizer),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step_count,
        }


def pretraining_step(
    model, recipe: dict, device, *, nsp: bool = False, rank: int = 0, world_size: int = 1,
    resume_state: dict | None = None,
) -> TrainStep:  # fmt: skip
    """LAMB with the warm-up/poly schedule over run.steps, the recipe's weights and compile mode, DDP
    without a static graph (it breaks under no_sync accumulation)."""
    run = run_config(recipe)
    bf16_weights = uses_bf16_weights(recipe, world_size, rank == 0)
    settings = recipe["optimizer"]
    optimizer = Lamb(
        parameter_groups(model, settings["weight_decay"], adapt=True),  # LAMB: no trust ratio undecayed
        lr=settings["lr"],
        betas=tuple(settings["betas"]),
        eps=settings["eps"],
        max_grad_norm=settings["max_grad_norm"],
        implementation=lamb_implementation(settings["implementation"], device),
        master_weights=bf16_weights,  # taken from the fp32 model, before TrainStep converts it
    )
    schedule = warmup_poly_schedule(
        optimizer,
        total_steps=run.steps,
        warmup=recipe["schedule"]["warmup"],
        power=recipe["schedule"]["decay_power"],
    )
    mode = compile_mode_of(recipe["compile"])
    if mode == "reduce-overhead" and (world_size > 1 or torch.device(device).type != "cuda"):
        if rank == 0:
            print("compile: reduce-overhead (CUDA graphs) is for one CUDA process; using the default mode")
        mode = "default"
    return TrainStep(
        model, optimizer, schedule, functools.partial(pretraining_losses, nsp=nsp), recipe, device,
        compile_mode=mode, bf16_weights=bf16_weights, static_graph=False, rank=rank, world_size=world_size,
        resume_state=resume_state,
    )  # fmt: skip


def squad_step(
    model, recipe: dict, device, total_steps: int, *, rank: int = 0, world_size: int = 1
) -> TrainStep:
    """AdamW (fused on a GPU) with linear warm-up and decay over ``total_steps``, gradients clipped to
    norm 1; no decay of biases and LayerNorm parameters."""
    settings = recipe["optimizer"]
    optimizer = torch.optim.AdamW(
        parameter_groups(model, settings["weight_decay"]),
        lr=settings["lr"],
        eps=settings["eps"],
        fused=torch.device(device).type == "cuda",
    )
    schedule = warmup_poly_schedule(optimizer, total_steps=total_steps, warmup=recipe["warmup"], power=1.0)
    return TrainStep(
        model,
        optimizer,
        schedule,
        squad_losses,
        recipe,
        device,
        clip_norm=1.0,
        rank=rank,
        world_size=world_size,
    )
