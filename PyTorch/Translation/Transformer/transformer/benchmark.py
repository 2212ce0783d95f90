"""Training tokens/s of our Transformer next to Hugging Face's MarianMTModel of the same dimensions,
and beam-search translation sentences/s, measured with zoo.bench.measure; a JSON report. With --gpus,
the scaling mode every PyTorch model shares (zoo.scaling): the recipe's training step over 1, 2, 4 ... GPUs.

    python -m transformer.benchmark --recipe configs/transformer_big_wmt14.yaml --amp bf16
    python -m transformer.benchmark --recipe configs/numbers_cpu.yaml --vocab-size 400 --batch-size 8 --seq-len 16
    python -m transformer.benchmark --gpus 1,2,4 --recipe configs/transformer_big_wmt14_8gpu.yaml

Both training steps take the same random batch (B sentences of S source and S target tokens), the
same Adam settings and the same autocast. Ours is transformer.step.TrainStep on the recipe's model
with the recipe's levers (``model.fused_qkv``, ``model.fused_cross_kv``, ``train.compile``,
``optimizer.fused``; ``--set`` turns one off). Marian is Hugging Face's step as its users run it fast:
SDPA attention, ``torch.compile`` (default mode) and fused Adam on a GPU; eager with plain Adam on the
CPU (``--marian-eager`` forces that everywhere). The report lists each measurement and the ratio
ours / Marian.

The scaling mode (``--gpus 1,2,4``, zoo.scaling) times TrainStep, DDP-wrapped as in training, on random
sentence pairs of ``benchmark.lengths`` tokens (batches of ``run.batch_per_gpu`` padded tokens, three
different ones per length, cycled; ``benchmark.vocab_size`` ids), ``run.accumulation`` batches an
update, in tokens/s.
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import time

import zoo.scaling
from zoo.cli import entry_point


def random_batch(batch: int, length: int, vocab_size: int, seed: int = 0) -> dict:
    import torch

    from transformer.model import BOS, EOS

    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab_size, (batch, length), generator=generator)
    tgt = torch.randint(4, vocab_size, (batch, length), generator=generator)
    src[:, -1] = EOS
    tgt[:, -1] = EOS
    tgt_in = torch.cat([torch.full((batch, 1), BOS), tgt[:, :-1]], dim=1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt}


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The recipe's TrainStep (DDP over ``world_size`` processes, compiled as ``train.compile`` says) on
    random pairs of each of ``benchmark.lengths`` tokens, ``run.batch_per_gpu`` padded tokens a batch,
    ``run.accumulation`` batches an update, three different updates per length, cycled (each new length
    is one more compilation: the first recompiles with dynamic shapes); items: the target tokens of one
    update on one GPU."""
    import torch.distributed as dist
    from zoo.recipe import run_config

    from transformer.model import PAD, build_model
    from transformer.step import TrainStep

    run, shape = run_config(recipe), recipe["benchmark"]
    rank = dist.get_rank() if dist.is_initialized() else 0
    model = build_model(recipe["model"], shape["vocab_size"]).to(device)
    step = TrainStep(model, recipe, device, world_size=world_size)
    updates = [
        [
            random_batch(
                run.batch_per_gpu // length, length, shape["vocab_size"], seed=1000 * rank + 10 * k + i
            )
            for i in range(run.accumulation)
        ]
        for length in shape["lengths"]
        for k in range(3)
    ]
    tokens = [sum(int((b["tgt_out"] != PAD).sum()) for b in update) for update in updates]
    cycle = itertools.cycle(updates)
    return zoo.scaling.Step(
        lambda: step(next(cycle)), items=round(sum(tokens) / len(tokens)), unit="tokens/s", model=model
    )


def marian_model(model_recipe: dict, vocab_size: int):
    """MarianMTModel with our dimensions (shared embeddings, sinusoidal positions, ReLU), SDPA attention."""
    from transformers import MarianConfig, MarianMTModel

    from transformer.model import BOS, EOS, PAD, ModelConfig

    cfg = ModelConfig.from_recipe(model_recipe, vocab_size)
    config = MarianConfig(
        vocab_size=vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.heads,
        decoder_attention_heads=cfg.heads,
        encoder_ffn_dim=cfg.ffn,
        decoder_ffn_dim=cfg.ffn,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_function="relu",
        max_position_embeddings=cfg.max_positions,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=EOS,
    )
    return MarianMTModel._from_config(config, attn_implementation="sdpa")


def first_call_seconds(step, sync) -> float:
    """Seconds of ``step``'s first call (with torch.compile: tracing and compiling included)."""
    began = time.perf_counter()
    step()
    if sync:
        sync()
    return time.perf_counter() - began


def measure_translation(model, args, device, amp: str, sync) -> dict:
    """Beam-search sentences/s of ``model`` on random source batches (zoo.bench.measure's dict)."""
    from zoo.bench import measure
    from zoo.torch import autocast

    from transformer.translate import translate_ids

    src = random_batch(args.translate_batch, args.seq_len, args.vocab_size, seed=1)["src"].to(device)

    def translate():
        with autocast(device, amp):
            translate_ids(model, src, beam=args.beam, max_length_a=1.0, max_length_b=0)

    return measure(
        translate,
        items_per_call=args.translate_batch,
        warmup=1,
        iters=max(1, args.iters // 5),
        windows=args.windows,
        sync=sync,
    )


def build_parser() -> argparse.ArgumentParser:
    from zoo.cli import add_run_args

    from transformer import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(
        prog="python -m transformer.benchmark", description=__doc__.splitlines()[0]
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_dir=False, resume=False)
    parser.add_argument("--vocab-size", type=int, default=33708, help="vocabulary size of the random batches")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per training batch")
    parser.add_argument("--seq-len", type=int, default=64, help="source and target tokens per sentence")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the translation measurement")
    parser.add_argument("--translate-batch", type=int, default=16, help="sentences per translation call")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--no-marian", action="store_true", help="skip the Hugging Face comparison")
    parser.add_argument("--no-translation", action="store_true", help="skip the beam-search measurement")
    parser.add_argument(
        "--marian-eager",
        action="store_true",
        help="run Marian eagerly with plain Adam (default: compiled with fused Adam on a GPU)",
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--output", default=None, help="the JSON report (default RESULTS_DIR/benchmark.json)")
    parser.add_argument(
        "--gpus",
        metavar="1,2,4",
        help="the scaling mode (zoo.scaling): the recipe's training step on each GPU count, per-GPU batch "
        "fixed; it takes --recipe, --set, --amp, --batch-size (tokens per GPU, run.batch_per_gpu), "
        "--window-seconds S (20), --windows N (3), --warmup N (20), --output FILE; "
        "benchmark.lengths and benchmark.vocab_size shape the random batches",
    )
    return parser


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import parse_args, recipe_from_args

    from transformer import DEFAULT_RECIPE

    if zoo.scaling.asked_for(argv):
        return zoo.scaling.main(
            argv, module="transformer.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE
        )
    args = parse_args(build_parser(), argv)
    import torch
    from zoo.bench import measure, write_report
    from zoo.recipe import run_config
    from zoo.torch import autocast, fast_math, grad_scaler

    from transformer.model import PAD, build_model
    from transformer.step import TrainStep, compile_mode  # after parsing: they load torch

    recipe = recipe_from_args(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    fast_math(device)
    amp, opt = run_config(recipe, args.recipe).precision, recipe["optimizer"]
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    batch = random_batch(args.batch_size, args.seq_len, args.vocab_size)
    tokens = int((batch["tgt_out"] != PAD).sum())
    adam = {"lr": opt["lr"], "betas": tuple(opt["betas"]), "eps": opt["eps"]}
    results = []

    levers = {
        "fused_qkv": recipe["model"].get("fused_qkv", False),
        "fused_cross_kv": recipe["model"].get("fused_cross_kv", False),
        "compile": compile_mode(recipe["train"]["compile"]),
        "fused_adam": opt["fused"],
    }
    print(f"ours: {', '.join(f'{k} {v}' for k, v in levers.items())}")
    torch.manual_seed(0)
    ours = build_model(recipe["model"], args.vocab_size).to(device).train()
    step = TrainStep(ours, recipe, device)

    def ours_step():
        step([batch])

    first = first_call_seconds(ours_step, sync)
    timing = measure(
        ours_step,
        items_per_call=tokens,
        warmup=args.warmup,
        iters=args.iters,
        windows=args.windows,
        sync=sync,
    )
    results.append({"name": "train_ours", "unit": "tokens/s", "first_step_s": first, **levers, **timing})
    print(f"training, ours:   {timing['throughput']:.1f} tokens/s (first step {first:.1f} s)")

    if not args.no_marian:
        fast_marian = device.type == "cuda" and not args.marian_eager
        marian = marian_model(recipe["model"], args.vocab_size).to(device).train()
        marian_optimizer = torch.optim.Adam(marian.parameters(), **adam, fused=fast_marian)
        marian_scaler = grad_scaler(device, amp)
        marian_net = torch.compile(marian) if fast_marian else marian
        on_device = {k: v.to(device) for k, v in batch.items()}
        print(f"Marian: compiled and fused Adam {fast_marian}")

        def marian_step():
            with autocast(device, amp):
                out = marian_net(
                    input_ids=on_device["src"],
                    attention_mask=on_device["src"] != PAD,
                    decoder_input_ids=on_device["tgt_in"],
                    labels=on_device["tgt_out"],
                )
            marian_scaler.scale(out.loss).backward()
            marian_scaler.step(marian_optimizer)
            marian_scaler.update()
            marian_optimizer.zero_grad(set_to_none=True)

        first = first_call_seconds(marian_step, sync)
        timing = measure(
            marian_step,
            items_per_call=tokens,
            warmup=args.warmup,
            iters=args.iters,
            windows=args.windows,
            sync=sync,
        )
        results.append(
            {
                "name": "train_marian",
                "unit": "tokens/s",
                "compiled": fast_marian,
                "first_step_s": first,
                **timing,
            }
        )
        ratio = results[0]["throughput"] / timing["throughput"]
        results.append({"name": "train_ratio_ours_over_marian", "unit": "x", "throughput": ratio})
        print(
            f"training, Marian: {timing['throughput']:.1f} tokens/s (first step {first:.1f} s;"
            f" ours / Marian {ratio:.2f}x)"
        )
        del marian, marian_net, marian_optimizer

    if not args.no_translation:
        ours.eval()
        timing = measure_translation(ours, args, device, amp, sync)
        results.append({"name": f"translate_beam{args.beam}_ours", "unit": "sentences/s", **timing})
        print(
            f"translation, beam {args.beam}: {timing['throughput']:.2f} sentences/s"
            f" (up to {args.seq_len} tokens each)"
        )
    output = pathlib.Path(args.output) if args.output else pathlib.Path(args.results_dir) / "benchmark.json"
    write_report(
        output,
        results,
        model="transformer",
        device=str(device),
        amp=amp,
        recipe=args.recipe,
        model_recipe=recipe["model"],
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        vocab_size=args.vocab_size,
        beam=args.beam,
    )
    print(f"report: {output}")
    return {r["name"]: r for r in results}


if __name__ == "__main__":
    main()
