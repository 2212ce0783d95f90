"""Training throughput of the recipe's step (ours: gpt.step.TrainStep, what train.py runs) next to Hugging
Face ``LlamaForCausalLM`` / ``GPT2LMHeadModel`` of the same shape and weights, as a user would write it
(FSDP2 ``fully_shard`` per decoder layer, ``torch.compile`` per layer where the recipe compiles, fused
AdamW, the same precision, sequence length and batch), on random tokens. tokens/s per GPU, MFU (model
FLOPs per token x tokens/s over the GPU's dense bf16 peak) and ours / peer.

    python -m gpt.benchmark --recipe configs/gpt3_1p3b.yaml                # this process (or under torchrun)
    python -m gpt.benchmark --recipe configs/llama31_8b.yaml --gpus 1,2,4  # one torchrun launch per count

``--gpus`` adds weak scaling (tokens/s per GPU at N over at 1, batch per GPU fixed). The table names the
command, device, precision, batch and date; ``--output FILE`` writes the rows as JSON (zoo.bench).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import socket
import subprocess
import sys
import tempfile

from zoo.cli import entry_point
from zoo.errors import UserError

from gpt.data import SyntheticTokens

# Dense bf16 tensor-core peak per GPU (FLOP/s), by a substring of the device name.
BF16_PEAK = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}


def peak_flops(device) -> float | None:
    import torch

    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK.items() if key in name), None)


class PeerStep:
    """The Hugging Face model of ``model``'s shape and weights, trained as a user would: FSDP2 per layer
    over several processes, compile per layer, fused AdamW, the same clip, precision and loss."""

    def __init__(self, model, recipe: dict, device, world: int):
        import torch

        from gpt.export import to_hf
        from gpt.parallel import parallel_settings

        settings, precision = parallel_settings(recipe["parallel"]), recipe["run"]["precision"]
        self.hf = to_hf(model).to(device).train()
        self.hf.config._attn_implementation = "sdpa"
        layers = self.hf.model.layers if hasattr(self.hf, "model") else self.hf.transformer.h
        if settings["checkpointing"] != "none":
            self.hf.gradient_checkpointing_enable()
        if settings["compile"]:
            for layer in layers:
                layer.compile()
        self.autocast = True
        if world > 1:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            options = {}
            if precision == "bf16":
                options["mp_policy"] = MixedPrecisionPolicy(
                    param_dtype=torch.bfloat16, reduce_dtype=torch.float32
                )
                self.autocast = False
            for layer in layers:
                fully_shard(layer, **options)
            fully_shard(self.hf, **options)
        self.device, self.precision = torch.device(device), precision
        fused = torch.device(device).type == "cuda"
        self.optimizer = torch.optim.AdamW(
            self.hf.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=fused or None
        )
        self.clip = float(recipe["optimizer"]["clip_norm"])

    def __call__(self, micro_batches: list):
        import torch
        import torch.nn.functional as F
        from zoo.torch import autocast

        from gpt.step import batch_to

        for array in micro_batches:
            tokens = batch_to(array, self.device)
            with (
                autocast(self.device, self.precision)
                if self.autocast
                else torch.autocast("cpu", enabled=False)
            ):
                logits = self.hf(input_ids=tokens[:, :-1]).logits
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            (loss / len(micro_batches)).backward()
        torch.nn.utils.clip_grad_norm_(self.hf.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def time_steps(step, micro_batches, tokens: int, args, device) -> float:
    """Tokens per second of one process, over ``args.steps`` steps after ``args.warmup``."""
    import torch
    from zoo.bench import measure

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else None
    result = measure(
        lambda: step(micro_batches), items_per_call=tokens, warmup=args.warmup, iters=args.steps, sync=sync
    )
    return result["throughput"]


def build_parser() -> argparse.ArgumentParser:
    from zoo.cli import add_run_args

    from gpt import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(
        prog="python -m gpt.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per GPU (run.batch_per_gpu)")
    parser.add_argument(
        "--accumulation", type=int, default=None, help="micro-batches per step (run.accumulation)"
    )
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default: benchmark.steps)")
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed steps first (default: benchmark.warmup)"
    )
    parser.add_argument(
        "--peer", choices=("huggingface", "none"), default=None, help="default: benchmark.peer"
    )
    parser.add_argument("--gpus", default=None, help="GPU counts, e.g. 1,2,4: one torchrun launch each")
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda:LOCAL_RANK where CUDA is)")
    parser.add_argument("--output", default=None, metavar="FILE", help="write the rows as JSON")
    return parser


def measure_here(args, recipe: dict) -> dict:
    """One row: ours (and the peer) on this process group."""
    import torch
    from zoo.recipe import run_config
    from zoo.torch import close_distributed, fast_math, init_distributed

    from gpt.model import model_config
    from gpt.parallel import build_layout, parallel_settings
    from gpt.step import TrainStep

    run = run_config(recipe, args.recipe)
    env, device = init_distributed(args.device)
    fast_math(device)
    layout = build_layout(parallel_settings(recipe["parallel"]), env.world_size, env.rank, device)
    seq_len = recipe["data"]["seq_len"]
    data = SyntheticTokens(recipe["model"]["vocab_size"], seq_len, seed=env.rank)
    micro = [torch.stack([torch.from_numpy(data.window(run.batch_per_gpu * m + i)) for i in range(run.batch_per_gpu)]).numpy()
             for m in range(run.accumulation)]  # fmt: skip
    tokens = run.batch_per_gpu * run.accumulation * seq_len
    cfg = model_config(recipe["model"])
    peak = peak_flops(device)
    row = {"gpus": env.world_size, "precision": run.precision, "batch_per_gpu": run.batch_per_gpu,
           "accumulation": run.accumulation, "seq_len": seq_len, "parameters": cfg.parameters()}  # fmt: skip
    ours = TrainStep(recipe, device, layout)
    row["ours_tokens_per_s_per_gpu"] = (
        time_steps(ours, micro, tokens, args, device) * layout.dp / env.world_size
    )
    peer = args.peer or recipe["benchmark"]["peer"]
    if peer == "huggingface":
        if layout.tp > 1:
            raise UserError("the Hugging Face peer runs FSDP2 only: benchmark with parallel.tensor=1")
        from gpt.model import build_model

        reference = build_model(recipe["model"])
        del ours
        peer_step = PeerStep(reference, recipe, device, env.world_size)
        row["peer_tokens_per_s_per_gpu"] = time_steps(peer_step, micro, tokens, args, device)
        row["ours_over_peer"] = row["ours_tokens_per_s_per_gpu"] / row["peer_tokens_per_s_per_gpu"]
    for name in ("ours", "peer"):
        key = f"{name}_tokens_per_s_per_gpu"
        if key in row:
            row[f"{name}_mfu"] = cfg.flops_per_token(seq_len) * row[key] / peak if peak else None
    row["device"] = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})"
    )
    row["date"] = datetime.date.today().isoformat()
    row["torch"] = torch.__version__
    close_distributed()
    return row


def launch_counts(argv: list, counts: list[int]) -> list[dict]:
    """One torchrun launch of this benchmark per GPU count (the same flags less --gpus); their rows."""
    rest, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--gpus":
            skip = True
        elif not item.startswith(("--gpus=", "--output")):
            rest.append(item)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for count in counts:
            report = pathlib.Path(scratch) / f"{count}.json"
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = str(probe.getsockname()[1])
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(count),
                   "--master_port", port, "-m", "gpt.benchmark", *rest, "--output", str(report)]  # fmt: skip
            proc = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True)
            if proc.returncode != 0 or not report.is_file():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                raise UserError(f"the {count}-GPU launch failed: {tail[0][:300]}")
            rows.append(json.loads(report.read_text())["results"][0])
    base = rows[0]["ours_tokens_per_s_per_gpu"]
    for row in rows:
        row["weak_scaling"] = row["ours_tokens_per_s_per_gpu"] / base
    return rows


def table(rows: list[dict], command: str) -> str:
    def number(value, fmt):
        return "n/a" if value is None else format(value, fmt)

    lines = ["| GPUs | ours tokens/s/GPU | peer tokens/s/GPU | ours / peer | ours MFU | peer MFU | weak scaling |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in rows:
        lines.append(
            f"| {row['gpus']} | {number(row['ours_tokens_per_s_per_gpu'], ',.0f')} "
            f"| {number(row.get('peer_tokens_per_s_per_gpu'), ',.0f')} | {number(row.get('ours_over_peer'), '.2f')} "
            f"| {number(row.get('ours_mfu'), '.1%')} | {number(row.get('peer_mfu'), '.1%')} "
            f"| {number(row.get('weak_scaling'), '.1%')} |"
        )
    first = rows[0]
    lines.append(
        f"\n{first['device']}, {first['precision']}, {first['batch_per_gpu']} x {first['seq_len']} tokens x "
        f"{first['accumulation']} per GPU, torch {first['torch']}, {first['date']}\ncommand: {command}"
    )
    return "\n".join(lines)


@entry_point
def main(argv=None) -> list[dict]:
    from zoo.cli import parse_args, recipe_from_args

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(build_parser(), argv)

    import shlex

    recipe = recipe_from_args(args)
    settings = recipe["benchmark"]
    args.steps = settings["steps"] if args.steps is None else args.steps
    args.warmup = settings["warmup"] if args.warmup is None else args.warmup
    if args.steps < 1 or args.warmup < 0:
        raise UserError("--steps must be >= 1 and --warmup >= 0")
    if args.gpus:
        try:
            counts = sorted({1, *(int(n) for n in args.gpus.split(",") if n)})
        except ValueError:
            raise UserError(f"--gpus {args.gpus!r}: expected GPU counts such as 1,2,4") from None
        rows = launch_counts(argv, counts)
    else:
        rows = [measure_here(args, recipe)]
    command = "scripts/benchmark.sh " + shlex.join(argv)
    if int(os.environ.get("RANK", "0")) == 0:
        print(table(rows, command))
        if args.output:
            from zoo.bench import write_report

            write_report(args.output, rows, command=command, device=rows[0]["device"])
    return rows


if __name__ == "__main__":
    main()
