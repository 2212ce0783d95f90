"""The pretraining step of a recipe: what ``pretrain.py`` trains with and ``benchmark.py`` times as "ours".

    model = build_model(recipe, vocab_size, nsp=False).to(device)
    step = PretrainingStep(model, recipe, device)         # LAMB, schedule, precision, compile, graphs
    loss, mlm_loss, sequences = step(micro_batches)       # `accumulation` micro-batches, one LAMB step

Every speed lever is a recipe key: ``amp``; ``weights`` (fp32, or bf16: bf16 parameters with fp32
master weights and fp32 gradient sums in LAMB); ``compile`` (false, true or a ``torch.compile`` mode:
``reduce-overhead`` adds CUDA graphs); ``optimizer.implementation`` (auto = the Triton kernels on a
GPU; foreach, fused_adam, compiled, per_tensor); ``batch_size``; ``accumulation``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from zoo.recipe import compile_mode
from zoo.torch import autocast, distributed_model, grad_scaler, parameter_groups, seed_everything

from bert import convert
from bert.lamb import Lamb, lamb_implementation, warmup_poly_schedule
from bert.model import BertForPreTraining, bert_config, pretraining_loss


def compile_mode_of(value) -> str | None:
    """The recipe's `compile`: false/None (eager), true (default mode) or a torch.compile mode name."""
    return compile_mode(value, key="compile")


def uses_bf16_weights(recipe: dict, world_size: int = 1, is_primary: bool = True) -> bool:
    """The recipe's `weights`: fp32 (default) or bf16 (bf16 parameters, fp32 master weights and fp32
    gradient sums in LAMB). bf16 needs bf16 autocast; several processes use fp32 (DDP would all-reduce
    bf16 gradients of the last micro-step only) with a notice."""
    value, amp = recipe.get("weights", "fp32"), recipe["amp"]
    if value not in ("fp32", "bf16"):
        raise SystemExit(f"weights: {value!r} is not fp32 or bf16")
    if value == "bf16" and amp != "bf16":
        raise SystemExit(f"weights: bf16 needs amp: bf16 (the recipe has amp: {amp})")
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
    seed_everything(recipe["seed"])
    model = BertForPreTraining(bert_config(recipe["model"], vocab_size=vocab_size))
    if init_state is not None:
        convert.load_into(model, init_state)
    if not nsp:
        model.bert.pooler.requires_grad_(False)
        model.nsp.requires_grad_(False)
    return model


def forward_loss(model, batch: dict, device, amp: str, nsp: bool):
    """(total loss, masked-LM loss) of one micro-batch under the recipe's autocast."""
    with autocast(device, amp):
        mlm_logits, nsp_logits = model(
            batch["input_ids"],
            batch["token_type_ids"],
            seq_ids=batch.get("seq_ids"),
            mlm_positions=batch["mlm_positions"],
            cls_positions=batch.get("cls_positions"),
            next_sentence=nsp,
        )
    return pretraining_loss(mlm_logits, batch["mlm_labels"], nsp_logits, batch.get("nsp_labels"))


class PretrainingStep:
    """LAMB with the warm-up/poly schedule, the grad scaler, DDP and torch.compile as the recipe says,
    around ``model`` (built by :func:`build_model`, fp32, on its device).

    ``resume_state`` (a checkpoint: model, optimizer, schedule, scaler, step) is restored before the
    model is converted to bf16 (master weights come from the fp32 weights). ``step_count`` is the
    number of optimizer steps taken; dropout is re-seeded from (seed, step, rank) at each step, so a
    resumed run repeats the unbroken one exactly.
    """

    def __init__(
        self, model, recipe: dict, device, *, nsp: bool = False, rank: int = 0, world_size: int = 1,
        resume_state: dict | None = None,
    ):  # fmt: skip
        self.model, self.recipe, self.device, self.nsp = model, recipe, device, nsp
        self.rank, self.world_size = rank, world_size
        self.amp = recipe["amp"]
        self.accumulation = recipe["accumulation"]
        self.bf16_weights = uses_bf16_weights(recipe, world_size, rank == 0)
        opt_cfg = recipe["optimizer"]
        self.optimizer = Lamb(
            parameter_groups(model, opt_cfg["weight_decay"], adapt=True),  # LAMB: no trust ratio undecayed
            lr=opt_cfg["lr"],
            betas=tuple(opt_cfg.get("betas", (0.9, 0.999))),
            eps=opt_cfg.get("eps", 1e-6),
            max_grad_norm=opt_cfg.get("max_grad_norm", 1.0),
            implementation=lamb_implementation(opt_cfg.get("implementation", "auto"), device),
            master_weights=self.bf16_weights,  # taken from the fp32 model, before it is converted below
        )
        self.schedule = warmup_poly_schedule(
            self.optimizer,
            total_steps=recipe["steps"],
            warmup=recipe["schedule"]["warmup"],
            power=recipe["schedule"]["decay_power"],
        )
        self.scaler = grad_scaler(device, self.amp)
        self.step_count = 0
        if resume_state is not None:
            model.load_state_dict(resume_state["model"])
            self.optimizer.load_state_dict(resume_state["optimizer"])
            self.schedule.load_state_dict(resume_state["schedule"])
            if resume_state.get("scaler"):  # saved by an fp16 run
                self.scaler.load_state_dict(resume_state["scaler"])
            self.step_count = int(resume_state["step"])
        if self.bf16_weights:
            model.to(torch.bfloat16)
        train_model = model
        if world_size > 1:  # no static graph: DDP's static-graph mode breaks under no_sync accumulation
            train_model = distributed_model(model, device, static_graph=False)
        mode = compile_mode_of(recipe.get("compile"))
        if mode == "reduce-overhead" and (world_size > 1 or device.type != "cuda"):
            if rank == 0:
                print(
                    "compile: reduce-overhead (CUDA graphs) is for one CUDA process; using the default mode"
                )
            mode = "default"
        self.compile_mode = mode
        self.train_model = torch.compile(train_model, mode=mode) if mode else train_model
        # With CUDA graphs the backward graph's outputs live in the graph pool and the next replay
        # overwrites them: after the first backward, each gradient is copied into a buffer of our own,
        # which later micro-steps accumulate into and zero_grad zeroes instead of freeing.
        self.graphs = mode == "reduce-overhead"
        self._own_grads = not self.graphs or self.bf16_weights  # bf16 weights: gradients go to LAMB's sums

    def __call__(self, micro_batches: Iterator[dict]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One optimizer step over the next ``accumulation`` micro-batches of ``micro_batches`` (dicts
        of CPU or device tensors; ``sequences``, the real sequences in it, stays on the host).
        Returns (loss, masked-LM loss) as device scalars averaged over the micro-batches, and the
        number of sequences trained on."""
        seed = self.recipe["seed"] * 1_000_003 + self.step_count * 1009 + self.rank
        torch.manual_seed(seed)  # dropout: exact on resume
        loss_sum = torch.zeros((), device=self.device)
        mlm_sum = torch.zeros((), device=self.device)
        sequences = 0
        for micro in range(self.accumulation):
            batch = next(micro_batches)
            sequences += int(batch["sequences"])  # a host count: no wait for the device
            batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items() if k != "sequences"}
            if self.graphs:
                torch.compiler.cudagraph_mark_step_begin()
            last = micro == self.accumulation - 1
            context = (
                self.train_model.no_sync()
                if not last and self.world_size > 1 and hasattr(self.train_model, "no_sync")
                else contextlib.nullcontext()
            )
            with context:
                loss, mlm = forward_loss(self.train_model, batch, self.device, self.amp, self.nsp)
                self.scaler.scale(loss / self.accumulation).backward()
            if self.bf16_weights:
                self.optimizer.accumulate_grads()
            if not self._own_grads:
                for p in self.model.parameters():
                    if p.grad is not None:
                        p.grad = p.grad.clone()
                self._own_grads = True
            loss_sum += loss.detach() / self.accumulation
            mlm_sum += mlm / self.accumulation
        self.scaler.unscale_(self.optimizer)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=not self.graphs)
        self.schedule.step()
        self.step_count += 1
        return loss_sum, mlm_sum, sequences
