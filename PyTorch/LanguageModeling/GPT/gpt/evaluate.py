"""Validation log-perplexity of a trained GPT (mean next-token negative log-likelihood, nats per token).

    python -m gpt.evaluate --checkpoint results/model.pt --data-dir /data/c4 [--samples 1024] [--amp bf16]

Scores the first ``--samples`` windows of the validation split (default: the recipe's eval.samples) at
the recipe's data.seq_len; prints one line and, with --json, writes the result.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from zoo.cli import AMP_CHOICES, entry_point
from zoo.errors import UserError

from gpt.data import TokenShards, check_tokenizer, read_meta


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpt.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="model.pt or checkpoint/ of gpt.train")
    parser.add_argument("--data-dir", default=None, help="prepared token shards ($DATA_DIR)")
    parser.add_argument("--amp", choices=AMP_CHOICES, default="fp32", help="mixed precision (default fp32)")
    parser.add_argument(
        "--samples", type=int, default=None, help="validation windows (default: eval.samples)"
    )
    parser.add_argument("--batch", type=int, default=None, help="windows per forward (default: eval.batch)")
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda where CUDA is)")
    parser.add_argument("--json", default=None, help="also write the result to this JSON file")
    return parser


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import parse_args

    args = parse_args(build_parser(), argv)

    import os

    data_dir = args.data_dir or os.environ.get("DATA_DIR")
    if not data_dir:
        raise UserError("pass --data-dir (or set DATA_DIR)")
    for name in ("samples", "batch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(args, name)}")
    read_meta(data_dir)  # the data folder is checked before the model is read (and before torch is imported)

    import torch

    from gpt.engine import evaluate
    from gpt.inference import load_model
    from gpt.parallel import Layout

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, recipe = load_model(args.checkpoint, device)
    check_tokenizer(data_dir, model.cfg.vocab_size)
    dataset = TokenShards(data_dir, "validation", recipe["data"]["seq_len"])
    result = evaluate(
        model,
        dataset,
        args.samples or recipe["eval"]["samples"],
        args.batch or recipe["eval"]["batch"],
        device=device,
        amp=args.amp,
        layout=Layout(dp=1, tp=1, dp_rank=0, tp_rank=0),
    )
    print(
        f"log_perplexity {result['log_perplexity']:.4f} over {result['samples']} validation windows "
        f"of {recipe['data']['seq_len']} tokens ({args.checkpoint})"
    )
    if args.json:
        from zoo.io import atomic_write

        with atomic_write(args.json) as tmp:
            pathlib.Path(tmp).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
