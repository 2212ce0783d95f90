"""Pretraining throughput: our recipe's training step next to transformers.BertForPreTraining, one process;
with ``--gpus 1,2,4`` the scaling of that step over GPU counts (``zoo.scaling``).

"Ours" is the recipe (``--recipe``, default the 1-GPU phase-1 recipe, and ``--set`` overrides): the
model, LAMB, precision, weights and compile mode of ``bert.step.pretraining_step``, the step
``pretrain.py`` trains with through ``bert.engine``; every lever is a recipe key. Hugging Face's ``BertForPreTraining``
runs as a user writes it: SDPA attention, the MLM head over every token with -100 labels elsewhere,
fused AdamW, the recipe's autocast, ``torch.compile`` (default mode) when the recipe compiles.
Both start from the same weights.

Data: by default synthetic full-length sequences (phase 1: no padding, so packing cannot show).
``--text DIR`` builds samples of the recipe's length with the project's own pipeline
(``zoo.data.bert_prepare.prepare``) from real English text (default ``/usr/share/common-licenses``, on every
Debian machine; WordPiece vocabulary trained on it): ours trains on packed samples, Hugging Face
on the same sequences one per sample, padded; throughput counts real sequences, and the report
gives both padding fractions.
Scaling mode (``--gpus 1,2,4 [--recipe ...] [--set ...] [--batch-size N] [--window-seconds S]``): for each
GPU count, the same launcher as ``train.sh`` starts the recipe's step on synthetic full-length samples of
``run.batch_per_gpu`` (per-GPU batch fixed), DDP-wrapped as in training; one timed call is one optimizer
step of ``run.accumulation`` micro-batches (gradients all-reduced on the last). Steady-state windows, the
replicas' weights compared after them, scaling against 1 GPU of the same call (``zoo.scaling``).
Needs torch, transformers, this package and zoo (scripts/benchmark.sh puts common/ on the path).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import platform
import sys
import tempfile
import time
from pathlib import Path

import zoo.scaling
from zoo.bench import KERNEL_FAMILIES, format_profile, measure, profile_step, write_report
from zoo.cli import add_run_args, entry_point, recipe_from_args
from zoo.cli import parse_args as parse_cli_args
from zoo.errors import UserError
from zoo.recipe import run_config
from zoo.torch import autocast, fast_math, parameter_groups

DEFAULT_TEXT = "/usr/share/common-licenses"
# recipe keys of this benchmark's own flags (zoo.cli.RUN_FLAGS maps --batch-size and --accumulation)
FLAG_KEYS = {"model": "model", "vocab_size": "vocab_size"}
# different synthetic micro-batches the scaling mode cycles through
SCALING_BATCHES = 8
# Kernel families of a BERT step for zoo.bench.profile_step (the LAMB kernels first).
BERT_FAMILIES = (
    ("optimizer (LAMB / Adam kernels)", ("_moments_kernel", "_apply_kernel", "multi_tensor_apply", "adam")),
) + KERNEL_FAMILIES


def synthetic_batch(batch: int, seq: int, predictions: int, vocab: int, device, seed: int = 0) -> dict:
    """Full-length single-sequence samples with ``predictions`` [MASK]ed positions each."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    positions = (
        torch.stack([torch.randperm(seq - 2, generator=g)[:predictions] + 1 for _ in range(batch)])
        .sort(1)
        .values
    )
    labels = torch.gather(ids, 1, positions)
    out = dict(
        input_ids=ids.scatter(1, positions, 4),  # [MASK]
        token_type_ids=torch.zeros_like(ids),
        mlm_positions=positions,
        mlm_labels=labels,
    )
    return {**{k: v.to(device) for k, v in out.items()}, "sequences": batch}


def real_text_batches(
    recipe: dict, text: str, vocab_size: int, count: int, device
) -> tuple[list, list, dict]:
    """(packed batches for ours, padded batches of the same sequences for Hugging Face, facts): samples
    of the recipe's length built by ``zoo.data.bert_prepare.prepare`` from ``text``, ``count`` micro-batches each
    (fewer if the text is short), on the device."""
    from zoo.data.bert import PretrainingData, SampleSpec
    from zoo.data.bert_prepare import prepare
    from zoo.data.wordpiece import train_vocab

    from bert.data import PretrainingBatches

    run = run_config(recipe)
    facts = {}
    with tempfile.TemporaryDirectory() as tmp:
        vocab = train_vocab([text], Path(tmp) / "vocab", vocab_size=vocab_size)
        batches = {}
        for packing in (True, False):
            spec = SampleSpec(
                max_seq=recipe["max_seq"],
                max_predictions=recipe["max_predictions"],
                packing=packing,
                short_seq_prob=0.0,
            )
            out = Path(tmp) / ("packed" if packing else "padded")
            meta = prepare([text], vocab, out, spec, workers=1, seed=run.seed)
            name = "packed" if packing else "padded"
            facts[name] = {
                "samples": meta["samples"],
                "sequences": meta["sequences"],
                "padding_fraction": 1 - meta["tokens"] / (meta["samples"] * spec.max_seq),
            }
            data = PretrainingData(out, seed=run.seed)
            loader = PretrainingBatches(data, run.batch_per_gpu)
            taken = min(count, loader.steps_per_epoch)
            batches[name] = [_to_device(loader[i], device) for i in range(taken)]
    if facts["packed"]["sequences"] != facts["padded"]["sequences"]:
        raise UserError("packed and padded samples hold different sequences: the pipeline changed")
    facts["vocab"] = f"WordPiece trained on {text}"
    return batches["packed"], [hf_padded(b) for b in batches["padded"]], facts


def _to_device(batch: dict, device) -> dict:
    moved = {k: v.to(device) for k, v in batch.items() if k != "sequences"}
    return {**moved, "sequences": int(batch["sequences"])}


def hf_padded(batch: dict) -> dict:
    """One sequence per sample: attention mask from the sequence ids, labels dense over the tokens."""
    import torch

    # unused prediction slots point at position 0 ([CLS], never a target) with label -100
    dense = torch.full_like(batch["input_ids"], -100).scatter_(1, batch["mlm_positions"], batch["mlm_labels"])
    return {
        "input_ids": batch["input_ids"],
        "token_type_ids": batch["token_type_ids"],
        "attention_mask": (batch["seq_ids"] > 0).long(),
        "dense_labels": dense,
        "sequences": batch["sequences"],
    }


def hf_dense(batch: dict) -> dict:
    """Hugging Face's labels for a synthetic batch: -100 everywhere but the masked positions."""
    import torch

    dense = torch.full_like(batch["input_ids"], -100).scatter_(1, batch["mlm_positions"], batch["mlm_labels"])
    return {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"], "dense_labels": dense,
            "sequences": batch["sequences"]}  # fmt: skip


def hf_model(config, device):
    import transformers

    hf_config = transformers.BertConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        hidden_dropout_prob=config.hidden_dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        layer_norm_eps=config.layer_norm_eps,
        attn_implementation="sdpa",
    )
    return transformers.BertForPreTraining(hf_config).to(device)


def ours_step(model, recipe: dict, batches: list[dict], device):
    """One optimizer step of the recipe's training step over the next micro-batches of ``batches`` (cycled)."""
    from bert.step import pretraining_step

    step = pretraining_step(model, recipe, device)
    feed = itertools.cycle(batches)

    def call():
        return step(feed)[0]["loss"]

    call.optimizer, call.compile_mode = step.optimizer, step.compile_mode
    return call


def hf_step(model, batches: list[dict], amp: str, device, compiled: bool, accumulation: int = 1):
    """One fused-AdamW step of Hugging Face's model over the next ``accumulation`` batches of
    ``batches`` (cycled; gradients summed over them, as ours accumulates its micro-batches)."""
    import torch
    import torch.nn.functional as F

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device.type == "cuda")
    feed = itertools.cycle(batches)

    def forward(batch):
        logits = model(
            input_ids=batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch.get("attention_mask"),
        ).prediction_logits
        return F.cross_entropy(
            logits.flatten(0, 1).float(), batch["dense_labels"].flatten(), ignore_index=-100
        )

    forward_fn = torch.compile(forward) if compiled else forward

    def step():
        for _ in range(accumulation):
            with autocast(device, amp):
                loss = forward_fn(next(feed))
            (loss / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    step.optimizer = optimizer
    return step


def weights_label(model, optimizer) -> str:
    """What the parameters were trained in, read from the model and its optimizer."""
    import torch

    dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[
        next(model.parameters()).dtype
    ]
    masters = any("master" in state for state in optimizer.state.values())
    return f"{dtype} + fp32 masters" if masters else dtype


def run(args, recipe: dict) -> tuple[list[dict], dict]:
    import torch

    from bert.convert import ours_to_hf
    from bert.step import build_model, compile_mode_of

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    fast_math(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    run = run_config(recipe)
    amp, seq, batch_size = run.precision, recipe["max_seq"], run.batch_per_gpu
    if args.text:
        ours_batches, hf_batches, facts = real_text_batches(
            recipe, args.text, recipe["vocab_size"], args.iters, device
        )
    else:
        batch = synthetic_batch(batch_size, seq, recipe["max_predictions"], recipe["vocab_size"], device)
        ours_batches, hf_batches, facts = [batch], [hf_dense(batch)], {"data": "synthetic, full length"}
    hf_compiled = compile_mode_of(recipe["compile"]) is not None
    results = []
    for kind in args.models:
        model = build_model(recipe, recipe["vocab_size"], nsp=False).to(device)
        if kind == "ours":
            timed_model, call = model, ours_step(model, recipe, ours_batches, device)
            batches, calls_per_batch = ours_batches, run.accumulation
        else:  # the same initial weights
            timed_model = hf_model(model.config, device)
            missing, unexpected = timed_model.load_state_dict(ours_to_hf(model.state_dict()), strict=False)
            assert not unexpected, unexpected
            del model
            timed_model.train()
            call = hf_step(timed_model, hf_batches, amp, device, hf_compiled, run.accumulation)
            batches, calls_per_batch = hf_batches, run.accumulation
        optimizer = call.optimizer
        # a call takes `calls_per_batch` batches of the cycle: with as many batches as steps in a window
        # (real text), every window counts the same sequences
        mean_sequences = sum(b["sequences"] for b in batches) / len(batches)
        began = time.perf_counter()
        first_loss = float(call().detach())
        sync()
        first_step_s = time.perf_counter() - began
        summary = measure(
            call,
            items_per_call=mean_sequences * calls_per_batch,
            warmup=args.warmup,
            iters=args.iters,
            windows=args.windows,
            sync=sync,
        )
        if args.profile:
            print(f"profile of {kind}, per step:", flush=True)
            print(format_profile(profile_step(call, sync, families=BERT_FAMILIES)), flush=True)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        results.append(
            {
                "model": kind,
                "name": "ours (recipe step)" if kind == "ours" else "transformers.BertForPreTraining",
                "data": "packed"
                if kind == "ours" and args.text
                else ("padded" if args.text else "synthetic"),
                "config": recipe["model"],
                "batch": batch_size,
                "seq": seq,
                "precision": amp,
                "accumulation": calls_per_batch,
                "compile": call.compile_mode if kind == "ours" else ("default" if hf_compiled else None),
                "weights": weights_label(timed_model, optimizer),
                "optimizer": f"lamb ({recipe['optimizer']['implementation']})"
                if kind == "ours"
                else "adamw fused",
                "first_step_s": first_step_s,
                "first_loss": first_loss,
                "sequences_per_s": summary["throughput"],
                "sequences_per_s_windows": summary["window_throughputs"],
                "peak_memory_gib": peak,
            }
        )
        print(
            f"{results[-1]['name']:<34} {summary['throughput']:10.1f} seq/s  (first loss {first_loss:.3f})",
            flush=True,
        )
        del timed_model, call, optimizer
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
    return results, facts


def optimizer_only(args, recipe: dict) -> list[dict]:
    """Time LAMB implementations' steps alone on the recipe model's parameters with random gradients:
    the device time (synchronised) and the host time to issue the step (not synchronised)."""
    import torch

    from bert.lamb import Lamb
    from bert.step import build_model

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = build_model(recipe, recipe["vocab_size"], nsp=True).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    groups = parameter_groups(model, 0.01, adapt=True)
    variants = {
        "lamb-triton": lambda: Lamb(groups, lr=1e-4, implementation="triton"),
        "lamb-foreach": lambda: Lamb(groups, lr=1e-4),
        "lamb-fused": lambda: Lamb(groups, lr=1e-4, implementation="fused_adam"),
        "adamw-fused": lambda: torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda"),
    }
    chosen = args.optimizers.split(",") if args.optimizers else list(variants)
    unknown = sorted(set(chosen) - set(variants))
    if unknown:
        raise UserError(f"--optimizers: unknown {unknown}; known: {', '.join(variants)}")
    results = []
    for name in chosen:
        optimizer = variants[name]()
        timed = measure(optimizer.step, items_per_call=1, warmup=args.warmup, iters=args.iters, sync=sync)
        # no sync at the end: the time the host takes to issue the steps (the device was idle at the start)
        issued = measure(optimizer.step, items_per_call=1, warmup=0, iters=args.iters)
        results.append(
            {
                "optimizer": name,
                "step_ms": 1000 / timed["throughput"],
                "host_issue_ms": 1000 / issued["throughput"],
            }
        )
        print(
            f"{name:<14} {results[-1]['step_ms']:7.2f} ms/step on the device, "
            f"{results[-1]['host_issue_ms']:7.2f} ms to issue",
            flush=True,
        )
    return results


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The scaling mode's step: the recipe's pretraining step (``bert.step.pretraining_step``: DDP over
    ``world_size`` ranks and compiled as training does) over synthetic full-length samples of
    run.batch_per_gpu (``bert.data.SyntheticBatches``, the data of ``pretrain.py --synthetic``, a few
    micro-batches cycled). One call is one optimizer step: run.accumulation micro-batches, gradients
    all-reduced on the last one only."""
    import torch.distributed as dist

    from bert.data import SampleSpec, SyntheticBatches
    from bert.step import build_model, pretraining_step

    run = run_config(recipe)
    rank = dist.get_rank() if dist.is_initialized() else 0
    spec = SampleSpec(max_seq=recipe["max_seq"], max_predictions=recipe["max_predictions"], packing=False)
    source = SyntheticBatches(run.batch_per_gpu, spec, recipe["vocab_size"], seed=run.seed + rank)
    batches = [_to_device(source[i], device) for i in range(SCALING_BATCHES)]
    model = build_model(recipe, recipe["vocab_size"], nsp=False).to(device)
    step = pretraining_step(model, recipe, device, rank=rank, world_size=world_size)
    feed = itertools.cycle(batches)
    return zoo.scaling.Step(
        lambda: step(feed), items=run.batch_per_gpu * run.accumulation, unit="seq/s", model=model
    )


SCALING_HELP = """scaling mode: scripts/benchmark.sh --gpus 1,2,4 [--recipe FILE] [--set KEY=VALUE] [--batch-size N]
[--amp ...] [--window-seconds S] [--windows N] [--warmup N] [--output FILE] times the recipe's training
step on 1, 2 and 4 GPUs (per-GPU batch fixed, one optimizer step of run.accumulation micro-batches a
call) through the launcher of train.sh; prints throughput, scaling against 1 GPU, whether the replicas
hold equal weights, the command, device and date (scripts/benchmark.sh --gpus 1 --help: every option)."""


def parse_args(argv=None) -> argparse.Namespace:
    from bert import DEFAULT_RECIPE

    p = argparse.ArgumentParser(
        prog="python -m bert.benchmark",
        description=__doc__.splitlines()[0],
        epilog=SCALING_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_dir=False,
        results_dir=False,
        resume=False,
    )
    p.add_argument(
        "--model", help="ours and Hugging Face: bert-large, bert-base, bert-tiny (recipe key model)"
    )
    p.add_argument("--batch-size", type=int, help="samples per micro-batch (recipe key run.batch_per_gpu)")
    p.add_argument(
        "--accumulation", type=int, default=1,
        help="ours and Hugging Face: micro-batches per timed optimizer step (run.accumulation; default 1, "
        "an optimizer step after every micro-batch, the least favourable case for ours' LAMB: the 1-GPU "
        "recipe's 1,024 would make one timed step last a minute)",
    )  # fmt: skip
    p.add_argument(
        "--text", nargs="?", const=DEFAULT_TEXT, default=None, metavar="DIR",
        help=f"real text instead of synthetic data: packed (ours) vs padded (Hugging Face) samples of the "
        f"recipe's length from DIR (default {DEFAULT_TEXT}); e.g. with --recipe configs/pretrain_phase2_1gpu.yaml",
    )  # fmt: skip
    p.add_argument("--vocab-size", type=int, help="embedding rows of both models (recipe key vocab_size)")
    p.add_argument("--models", nargs="+", choices=["ours", "hf"], default=["ours", "hf"])
    p.add_argument(
        "--warmup", type=int, default=10, help="steps before timing (after the first, compiling one)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=50,
        help="optimizer steps in each timed window (--text: also the batches built)",
    )
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    p.add_argument("--profile", action="store_true", help="print device time per kernel family of each step")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    p.add_argument("--output", default="results/benchmark.json", help="JSON report")
    p.add_argument("--optimizer-only", action="store_true", help="time LAMB implementations' steps alone")
    p.add_argument(
        "--optimizers",
        help="with --optimizer-only: a subset of lamb-triton,lamb-foreach,lamb-fused,adamw-fused",
    )
    return parse_cli_args(p, argv)


@entry_point
def main(argv=None) -> None:
    from bert import DEFAULT_RECIPE

    if zoo.scaling.asked_for(argv):
        zoo.scaling.main(argv, module="bert.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE)
        return
    args = parse_args(argv)

    import torch

    recipe = recipe_from_args(args, FLAG_KEYS)
    if args.optimizer_only:
        write_report(args.output, optimizer_only(args, recipe), command=" ".join(sys.argv))
        return
    results, facts = run(args, recipe)
    ratio = None
    by_kind = {r["model"]: r["sequences_per_s"] for r in results}
    if len(by_kind) == 2:
        ratio = by_kind["ours"] / by_kind["hf"]
        print(f"ours / transformers: {ratio:.3f}x (real sequences per second)", flush=True)
    if args.text:
        print(
            f"padding: {facts['packed']['padding_fraction']:.1%} of tokens packed, "
            f"{facts['padded']['padding_fraction']:.1%} one sequence per sample "
            f"({facts['packed']['sequences']} sequences in {facts['packed']['samples']} packed samples)",
            flush=True,
        )
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available() and args.device != "cpu"
        else platform.processor() or "cpu"
    )
    meta = {"device": device, "torch": torch.__version__, "command": " ".join(sys.argv), "recipe": args.recipe,
            "overrides": args.set, "data": facts, "ratio_ours_over_hf": ratio}  # fmt: skip
    try:
        import transformers

        meta["transformers"] = transformers.__version__
    except ImportError:
        pass
    write_report(args.output, results, **meta)
    print(f"report: {args.output}")


if __name__ == "__main__":
    main()
