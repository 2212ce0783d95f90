"""Word error rate of a trained RNN-T (model.pt) on a prepared split, greedy decoding, scored by jiwer.

    python -m rnnt.evaluate --checkpoint results/model.pt --data-dir /data/librispeech [--split dev-clean]

Prints the WER (a fraction, MLPerf's unit) and writes --output (JSON: wer, samples, seconds, split) when asked.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from types import SimpleNamespace

from zoo.cli import AMP_CHOICES, entry_point
from zoo.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/evaluate.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint", required=True, help="model.pt written by train.py (or download_checkpoint.sh)"
    )
    parser.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="prepared LibriSpeech folder ($DATA_DIR)"
    )
    parser.add_argument("--split", default="dev-clean", help="manifest to score (default dev-clean)")
    parser.add_argument(
        "--amp", choices=AMP_CHOICES, default="fp32", help="precision of decoding (default fp32)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="utterances per batch (default: the model's eval.batch_size)",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda where CUDA is)")
    parser.add_argument("--output", default=None, help="also write the result as JSON here")
    return parser


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import parse_args

    args = parse_args(build_parser(), argv)

    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be a positive integer, not {args.batch_size}")

    import torch
    from zoo.io import atomic_write

    from rnnt.data import Utterances
    from rnnt.engine import evaluate
    from rnnt.inference import load_recognizer

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    recognizer = load_recognizer(args.checkpoint, device, args.amp)
    if not args.data_dir:
        raise UserError("pass --data-dir (or set DATA_DIR)")
    if not pathlib.Path(args.data_dir).is_dir():
        raise UserError(f"data dir {args.data_dir} does not exist")
    eval_set = Utterances(args.data_dir, [args.split], recognizer.tokenizer)
    eval_cfg = dict(recognizer.settings["eval"])
    if args.batch_size:
        eval_cfg["batch_size"] = args.batch_size
    single = SimpleNamespace(rank=0, world_size=1)  # one process scores the whole split
    result = evaluate(
        recognizer.model,
        eval_set,
        recognizer.features,
        device,
        args.amp,
        eval_cfg,
        single,
        recognizer.tokenizer,
    )
    result["split"] = args.split
    print(
        f"WER {result['wer']:.4f} on {args.split} ({result['samples']} utterances, {result['seconds']:.1f} s)"
    )
    if args.output:
        with atomic_write(args.output) as tmp:
            pathlib.Path(tmp).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
