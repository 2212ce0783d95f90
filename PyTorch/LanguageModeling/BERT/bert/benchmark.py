"""Phase-1 pretraining throughput: our BERT next to transformers.BertForPreTraining, same data, one process.

Both train on the same synthetic batch (seq 128, batch 64 by default, 20 masked positions per
sequence) with bf16 autocast and, on a GPU, torch.compile. Ours: fused QKV, SDPA, MLM head on the
masked positions only, residual stream in bf16, CUDA graphs (compile mode reduce-overhead), LAMB in
two Triton kernels on a GPU, bf16 parameters with fp32 master weights in LAMB (as the 1-GPU
recipes; no gradient accumulation here). Hugging Face: SDPA attention, the MLM head over every
token with -100 labels elsewhere (its documented usage), fused AdamW: what a user writes with it.
Needs torch, transformers, this package and zoo (scripts/benchmark.sh puts common/ on the path).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time

import torch
import torch._inductor.config
import torch.nn.functional as F
from zoo.bench import (
    KERNEL_FAMILIES,
    format_profile,
    inductor_options,
    measure,
    profile_step,
    write_report,
)
from zoo.torch import autocast, fast_math, parameter_groups

from bert.convert import ours_to_hf
from bert.lamb import Lamb, lamb_implementation
from bert.model import BertForPreTraining, bert_config


def synthetic_batch(batch: int, seq: int, predictions: int, vocab: int, device, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    positions = (
        torch.stack([torch.randperm(seq - 2, generator=g)[:predictions] + 1 for _ in range(batch)])
        .sort(1)
        .values
    )
    targets = torch.gather(ids, 1, positions)
    dense_labels = torch.full((batch, seq), -100).scatter_(1, positions, targets)
    ids = ids.scatter(1, positions, 4)  # [MASK]
    out = dict(
        input_ids=ids,
        token_type_ids=torch.zeros_like(ids),
        positions=positions,
        labels=targets,
        dense_labels=dense_labels,
    )
    return {k: v.to(device) for k, v in out.items()}


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


def make_step(
    kind: str,
    model,
    batch: dict,
    amp: str,
    device_type: str,
    compile_model: bool,
    *,
    optimizer_name="lamb",
    compile_optimizer=False,
    compile_mode=None,
    master_weights=False,
):
    """A function running one optimizer step of `kind` ("ours" or "hf") on the batch; returns loss."""
    if kind == "ours":
        if optimizer_name.startswith("lamb"):
            implementations = {
                "lamb": lamb_implementation("auto", device_type),
                "lamb-triton": "triton", "lamb-fused": "fused_adam", "lamb-foreach": "foreach",
                "lamb-compiled": "compiled",
            }  # fmt: skip
            implementation = implementations[optimizer_name]
            optimizer = Lamb(
                parameter_groups(model, 0.01, adapt=True),
                lr=1e-4,
                implementation=implementation,
                master_weights=master_weights,
            )
            if master_weights:  # as the recipe: masters from the fp32 weights, then the model in bf16
                model.to(torch.bfloat16)
        else:
            optimizer = torch.optim.AdamW(
                model.parameters(), lr=1e-4, weight_decay=0.01, fused=device_type == "cuda"
            )

        def forward():
            mlm, _ = model(
                batch["input_ids"],
                batch["token_type_ids"],
                mlm_positions=batch["positions"],
                next_sentence=False,
            )
            return F.cross_entropy(mlm.flatten(0, 1).float(), batch["labels"].flatten())
    else:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=1e-4, weight_decay=0.01, fused=device_type == "cuda"
        )

        def forward():
            logits = model(
                input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"]
            ).prediction_logits
            return F.cross_entropy(
                logits.flatten(0, 1).float(), batch["dense_labels"].flatten(), ignore_index=-100
            )

    forward_fn = torch.compile(forward, mode=compile_mode) if compile_model else forward

    optimizer_step = torch.compile(optimizer.step) if compile_optimizer and kind == "ours" else optimizer.step

    def step():
        with autocast(device_type, amp):
            loss = forward_fn()
        loss.backward()
        optimizer_step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    step.optimizer = optimizer
    return step


def weights_label(model, optimizer) -> str:
    """What the parameters were trained in, read from the model and its optimizer."""
    dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[
        next(model.parameters()).dtype
    ]
    masters = any("master" in state for state in optimizer.state.values())
    return f"{dtype} + fp32 masters" if masters else dtype


def time_steps(step, *, items: int, warmup: int, iters: int, windows: int, sync) -> dict:
    """Throughput over ``windows`` runs of ``iters`` steps after ``warmup`` steps (zoo.bench.measure:
    the clock is read, after a sync, only at window ends, so the host may run ahead of the GPU as in
    training). The median window is reported."""
    summary = measure(step, items_per_call=items, warmup=warmup, iters=iters, windows=windows, sync=sync)
    throughput = summary["throughput"]
    return {
        "throughput": throughput,
        "throughput_windows": summary["window_throughputs"],
        "step_ms": 1000 * items / throughput,
        "steps": iters * windows,
    }


# Kernel families of a BERT step for zoo.bench.profile_step (the LAMB kernels first).
BERT_FAMILIES = (
    ("optimizer (LAMB / Adam kernels)", ("_moments_kernel", "_apply_kernel", "multi_tensor_apply", "adam")),
) + KERNEL_FAMILIES
SDPA_BACKENDS = ("flash", "mem_efficient", "cudnn", "math")


def choose_sdpa(name: str | None) -> None:
    """Leave only `name`'s scaled_dot_product_attention kernel enabled (None: PyTorch's choice)."""
    if name is None:
        return
    for backend in SDPA_BACKENDS:
        getattr(torch.backends.cuda, f"enable_{backend}_sdp")(backend == name)


def run(args) -> list[dict]:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    fast_math(device)
    choose_sdpa(args.sdpa)
    if args.ours_optimizer == "lamb-triton" and device.type != "cuda" and "ours" in args.models:
        raise SystemExit("--ours-optimizer lamb-triton needs a CUDA device (use lamb on a CPU)")
    lamb_bf16 = args.amp == "bf16" and args.ours_optimizer.startswith("lamb")
    if args.weights is None:  # as the 1-GPU recipes: bf16 parameters with fp32 masters in LAMB on a GPU
        args.weights = "bf16" if device.type == "cuda" and lamb_bf16 else "fp32"
    bf16_weights = args.weights == "bf16"
    if bf16_weights and not lamb_bf16:
        raise SystemExit("--weights bf16 needs --amp bf16 and a LAMB optimizer (it keeps the fp32 masters)")
    compile_model = args.compile if args.compile is not None else device.type == "cuda"
    # ours: CUDA graphs by default on a GPU (the recipe's lever); Hugging Face: torch.compile's default
    ours_mode = args.compile_mode or ("reduce-overhead" if device.type == "cuda" else "default")
    config = bert_config(args.model, vocab_size=args.vocab_size, fp32_residual=args.fp32_residual)
    batch = synthetic_batch(args.batch_size, args.seq, args.predictions, config.vocab_size, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    inductor_patch = inductor_options(args.inductor)
    results = []
    for kind in args.models:
        patch = inductor_patch if kind == "ours" else {}
        with torch._inductor.config.patch(patch):  # ours only: the baseline keeps the defaults
            torch.manual_seed(0)
            ours = BertForPreTraining(config)
            if kind == "ours":
                model = ours.to(device)
            else:  # same initial weights in both
                model = hf_model(config, device)
                missing, unexpected = model.load_state_dict(ours_to_hf(ours.state_dict()), strict=False)
                assert not unexpected, unexpected
            model.train()
            step = make_step(
                kind, model, batch, args.amp, device.type, compile_model,
                optimizer_name=args.ours_optimizer, compile_optimizer=args.compile_optimizer,
                compile_mode=ours_mode if kind == "ours" else "default", master_weights=bf16_weights,
            )  # fmt: skip
            began = time.perf_counter()
            first_loss = float(step().detach())
            sync()
            first_step_s = time.perf_counter() - began
            summary = time_steps(
                step,
                items=args.batch_size,
                warmup=args.warmup,
                iters=args.iters,
                windows=args.windows,
                sync=sync,
            )
            if args.profile:
                print(f"profile of {kind}, per step:", flush=True)
                print(format_profile(profile_step(step, sync, families=BERT_FAMILIES)), flush=True)
            tables = getattr(step.optimizer, "_tables", {})
            rebuilds = sum(t.rebuilds for t in tables.values()) if tables else None
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
            results.append(
                {
                    "model": kind,
                    "name": "ours (bert.model)" if kind == "ours" else "transformers.BertForPreTraining",
                    "config": args.model,
                    "batch": args.batch_size,
                    "seq": args.seq,
                    "precision": args.amp,
                    "compile": compile_model and (ours_mode if kind == "ours" else "default"),
                    "sdpa": args.sdpa or "auto",
                    "fp32_residual": args.fp32_residual if kind == "ours" else True,
                    "inductor": patch,
                    "weights": weights_label(model, step.optimizer),
                    "optimizer": (args.ours_optimizer if kind == "ours" else "adamw")
                    + (" compiled" if args.compile_optimizer and kind == "ours" else ""),
                    "first_step_s": first_step_s,
                    "first_loss": first_loss,
                    "sequences_per_s": summary["throughput"],
                    "peak_memory_gib": peak,
                    "lamb_grad_table_builds": rebuilds,
                    **summary,
                }
            )
            print(
                f"{results[-1]['name']:<34} {summary['throughput']:10.1f} seq/s  (first loss {first_loss:.3f})",
                flush=True,
            )
        del model, ours, step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
    return results


def optimizer_only(args) -> list[dict]:
    """Time optimizer steps alone on the model's parameters with random gradients: the device time
    (synchronised) and the host time to issue the step (not synchronised)."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = BertForPreTraining(bert_config(args.model, vocab_size=args.vocab_size)).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    variants = {
        "lamb-triton": lambda: Lamb(
            parameter_groups(model, 0.01, adapt=True), lr=1e-4, implementation="triton"
        ),
        "lamb-foreach": lambda: Lamb(parameter_groups(model, 0.01, adapt=True), lr=1e-4),
        "lamb-fused": lambda: Lamb(
            parameter_groups(model, 0.01, adapt=True), lr=1e-4, implementation="fused_adam"
        ),
        "lamb-compiled": lambda: Lamb(
            parameter_groups(model, 0.01, adapt=True), lr=1e-4, implementation="compiled"
        ),
        "adamw-fused": lambda: torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda"),
    }
    results = []
    chosen = args.optimizers.split(",") if args.optimizers else list(variants)
    unknown = sorted(set(chosen) - set(variants))
    if unknown:
        raise SystemExit(f"--optimizers: unknown {unknown}; known: {', '.join(variants)}")
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
            f"{name:<14} {results[-1]['step_ms']:7.2f} ms/step on the device, {results[-1]['host_issue_ms']:7.2f} ms to issue",
            flush=True,
        )
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bert.benchmark", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bert-large", help="bert-large, bert-base, bert-tiny")
    p.add_argument("--tiny", action="store_true", help="bert-tiny, batch 8, few steps: a CPU smoke run")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--predictions", type=int, default=20, help="masked positions per sequence")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--amp", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on for CUDA"
    )
    p.add_argument(
        "--ours-optimizer", default="lamb",
        choices=["lamb", "lamb-triton", "lamb-fused", "lamb-foreach", "lamb-compiled", "adamw"],
        help="ours: LAMB (default: the Triton kernels on a GPU, foreach ops on a CPU), LAMB on the fused Adam "
        "kernel, with foreach ops, compiled per tensor, or fused AdamW",
    )  # fmt: skip
    p.add_argument(
        "--compile-mode",
        help="ours: torch.compile mode (default: reduce-overhead = CUDA graphs on a GPU, "
        "default on a CPU); Hugging Face always runs in the default mode",
    )
    p.add_argument(
        "--sdpa", choices=SDPA_BACKENDS, help="force one attention kernel (default: PyTorch's choice)"
    )
    p.add_argument(
        "--fp32-residual", action="store_true", help="ours: keep the residual stream in fp32 under autocast"
    )
    p.add_argument(
        "--weights",
        choices=["fp32", "bf16"],
        help="ours: parameters in fp32 under autocast, or in bf16 with fp32 master weights in LAMB (no "
        "per-step weight casts); default bf16 on a GPU with --amp bf16 and LAMB (as the 1-GPU recipes), else fp32",
    )
    p.add_argument(
        "--bf16-weights", dest="weights", action="store_const", const="bf16", help="--weights bf16"
    )
    p.add_argument(
        "--fp32-weights", dest="weights", action="store_const", const="fp32", help="--weights fp32"
    )
    p.add_argument(
        "--inductor", action="append", default=[], metavar="KEY=VALUE",
        help="ours: a torch._inductor.config setting while it compiles and runs, e.g. "
        "triton.mix_order_reduction_split_size=64 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--profile", action="store_true", help="print device time per kernel family of each model's step"
    )
    p.add_argument("--compile-optimizer", action="store_true", help="ours: torch.compile the optimizer step")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50, help="steps in each timed window")
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    p.add_argument("--models", nargs="+", choices=["ours", "hf"], default=["ours", "hf"])
    p.add_argument("--device", default=None)
    p.add_argument("--output", default="results/benchmark.json", help="JSON report")
    p.add_argument("--optimizer-only", action="store_true", help="time the optimizer variants' steps alone")
    p.add_argument(
        "--optimizers", help="with --optimizer-only: comma-separated subset of "
        "lamb-triton,lamb-foreach,lamb-fused,lamb-compiled,adamw-fused",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.tiny:
        args.model, args.batch_size, args.warmup, args.iters, args.windows = "bert-tiny", 8, 2, 5, 2
        args.vocab_size = min(args.vocab_size, 2000)
    if args.optimizer_only:
        print(json.dumps(optimizer_only(args)))
        return
    results = run(args)
    ratio = None
    by_kind = {r["model"]: r["sequences_per_s"] for r in results}
    if len(by_kind) == 2:
        ratio = by_kind["ours"] / by_kind["hf"]
        print(f"ours / transformers: {ratio:.3f}x", flush=True)
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available() and args.device != "cpu"
        else platform.processor() or "cpu"
    )
    meta = {
        "device": device,
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
        "ratio_ours_over_hf": ratio,
    }
    try:
        import transformers

        meta["transformers"] = transformers.__version__
    except ImportError:
        pass
    write_report(args.output, results, **meta)
    print(f"report: {args.output}")


if __name__ == "__main__":
    main()
