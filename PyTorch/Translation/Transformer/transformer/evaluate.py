"""Translate a test set (or any file) with a trained model and score detokenised BLEU with sacrebleu.

    python -m transformer.evaluate --checkpoint results/model.pt --data-dir DATA [--split test]
    python -m transformer.evaluate --checkpoint results/model.pt --input news.en [--reference news.de]

The vocabulary is the data folder's tokenizer.json, else the one saved beside the checkpoint. Prints
``BLEU <score> (<sacrebleu signature>)``; with --results-dir writes translations and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib

from zoo.cli import entry_point
from zoo.errors import UserError


def score_bleu(hyps: list, refs: list) -> tuple[float, str]:
    """(corpus BLEU in points, sacrebleu's signature) of detokenised hypotheses against one reference."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise UserError(f"{len(hyps)} translations but {len(refs)} references")
    metric = BLEU()
    result = metric.corpus_score(hyps, [refs])
    return float(result.score), str(metric.get_signature())


def load_model(path, device="cpu"):
    """(model in eval mode, its saved settings) from model.pt, or from a training checkpoint.pt."""
    import torch

    from transformer.model import build_model

    path = pathlib.Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated or foreign file: say which one, in one line
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("kind") not in ("transformer", "transformer-training"):
        raise UserError(f"{path} is not a Transformer checkpoint")
    if state["kind"] == "transformer-training":
        recipe = state["recipe"]
        settings = {"model_recipe": recipe["model"], "langs": recipe["data"]["langs"], "eval": recipe["eval"]}
        vocab_size = state["model"]["embed.weight"].shape[0]
    else:
        settings = {k: state[k] for k in ("model_recipe", "langs", "eval")}
        vocab_size = state["vocab_size"]
    model = build_model(settings["model_recipe"], vocab_size)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[-1][:200]
        raise UserError(f"{path} does not fit its own model settings: {reason}") from None
    return model.to(device).eval(), settings


def tokenizer_for(data_dir, checkpoint):
    """The data folder's vocabulary if given, else tokenizer.json beside the checkpoint."""
    from transformer.data import load_tokenizer

    if data_dir:
        return load_tokenizer(data_dir)
    return load_tokenizer(pathlib.Path(checkpoint).parent)


def build_parser() -> argparse.ArgumentParser:
    """The flags; no --recipe: the model and its decoding settings come with the checkpoint."""
    from zoo.cli import AMP_CHOICES

    parser = argparse.ArgumentParser(
        prog="python -m transformer.evaluate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--checkpoint", required=True, help="model.pt or checkpoint.pt")
    parser.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="prepared data folder ($DATA_DIR)"
    )
    parser.add_argument(
        "--results-dir",
        default=os.environ.get("RESULTS_DIR", "results"),
        help="where translations.txt and evaluation.json go unless --output ($RESULTS_DIR)",
    )
    parser.add_argument(
        "--amp", choices=AMP_CHOICES, default="fp32", help="mixed precision (fp32: no autocast)"
    )
    parser.add_argument("--split", default="test", help="the data folder's split to score (default test)")
    parser.add_argument("--input", default=None, help="translate this file (one sentence per line) instead")
    parser.add_argument("--reference", default=None, help="score --input's translations against this file")
    parser.add_argument("--output", default=None, help="write the translations here (default RESULTS_DIR)")
    parser.add_argument("--beam", type=int, default=None, help="beam size (default: the checkpoint's, 4)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    return parser


def refuse_overwriting_inputs(output: pathlib.Path, inputs: list) -> None:
    """A UserError when the translations (``output``) or evaluation.json beside them would be written over
    one of ``inputs`` ((flag, path) pairs), however it is named (relative path, symlink, hard link)."""
    for written in (output, output.with_name("evaluation.json")):
        for flag, path in inputs:
            if path is not None and _same_file(written, pathlib.Path(path)):
                raise UserError(
                    f"{written} would overwrite the {flag} file {path}: write the translations elsewhere (--output)"
                )


def _same_file(a: pathlib.Path, b: pathlib.Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import parse_args

    args = parse_args(build_parser(), argv)

    if args.beam is not None and args.beam < 1:
        raise UserError(f"--beam must be a positive integer, not {args.beam}")
    if args.data_dir and not pathlib.Path(args.data_dir).is_dir():
        raise UserError(f"data dir {args.data_dir} does not exist")
    output = pathlib.Path(args.output) if args.output else pathlib.Path(args.results_dir) / "translations.txt"
    refuse_overwriting_inputs(output, [("--input", args.input), ("--reference", args.reference)])

    # The flags and the paths are checked before torch is imported: bad input ends in a second.
    import torch
    from zoo.io import atomic_write
    from zoo.torch import autocast

    from transformer.data import read_lines, read_parallel
    from transformer.translate import translate_lines

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, settings = load_model(args.checkpoint, device)
    tokenizer = tokenizer_for(args.data_dir, args.checkpoint)
    if tokenizer.get_vocab_size() != model.cfg.vocab_size:
        raise UserError(
            f"the vocabulary has {tokenizer.get_vocab_size()} tokens but the checkpoint {model.cfg.vocab_size}"
        )
    eval_cfg = settings["eval"]
    langs = settings["langs"]
    if args.input:
        source = pathlib.Path(args.input)
        if args.reference:
            lines, refs = read_parallel(source, args.reference)
        else:
            lines, refs = read_lines(source), None
    else:
        if not args.data_dir:
            raise UserError("pass --data-dir (or set DATA_DIR) or --input FILE")
        data_dir = pathlib.Path(args.data_dir)
        split = [data_dir / f"{args.split}.{langs[0]}", data_dir / f"{args.split}.{langs[1]}"]
        refuse_overwriting_inputs(output, [("--data-dir", path) for path in split])
        lines, refs = read_parallel(*split)
    with autocast(device, args.amp):
        hyps = translate_lines(
            model,
            tokenizer,
            lines,
            beam=args.beam or eval_cfg["beam"],
            device=device,
            batch_tokens=eval_cfg["batch_tokens"],
            length_penalty=eval_cfg["length_penalty"],
            max_length_a=eval_cfg["max_length_a"],
            max_length_b=eval_cfg["max_length_b"],
        )
    summary = {"sentences": len(hyps), "beam": args.beam or eval_cfg["beam"]}
    if refs is not None:
        bleu, signature = score_bleu(hyps, refs)
        summary.update(bleu=bleu, signature=signature)
        print(f"BLEU {bleu:.2f} ({signature})")
    with atomic_write(output) as tmp:
        tmp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    if refs is None:
        print(f"{len(hyps)} translations written to {output}")
    with atomic_write(output.with_name("evaluation.json")) as tmp:
        tmp.write_text(json.dumps(summary, indent=1) + "\n")
    return {**summary, "translations": hyps}


if __name__ == "__main__":
    main()
