"""Continue a prompt with a trained GPT: greedy (temperature 0) or sampled (temperature, top-k, seed),
one forward for the prompt and one per new token over the KV cache.

    python -m gpt.generate --checkpoint results/model.pt --prompt "The with statement"
    python -m gpt.generate --checkpoint results/model.pt --prompt "..." --temperature 0.8 --top-k 40 --seed 1

The tokenizer is the tokenizer.json beside the checkpoint (gpt.train copies it there) or --tokenizer.
Defaults come from the recipe's generate: section.
"""

from __future__ import annotations

import argparse
import pathlib

from zoo.cli import entry_point
from zoo.errors import UserError

from gpt.data import EOS, TOKENIZER, load_tokenizer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpt.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="model.pt or checkpoint/ of gpt.train")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--tokenizer", default=None, help="tokenizer.json (default: beside the checkpoint)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: generate.max_new_tokens")
    parser.add_argument("--temperature", type=float, default=None, help="0: greedy (default: the recipe's)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="the sampling generator's seed")
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda where CUDA is)")
    return parser


def tokenizer_beside(checkpoint, given=None):
    path = pathlib.Path(given) if given else pathlib.Path(checkpoint).parent / TOKENIZER
    if not given and pathlib.Path(checkpoint).is_dir():
        path = pathlib.Path(checkpoint).parent / TOKENIZER
    return load_tokenizer(path)


def generation_settings(args, recipe: dict) -> dict:
    settings = recipe["generate"]
    chosen = {
        "max_new_tokens": settings["max_new_tokens"] if args.max_new_tokens is None else args.max_new_tokens,
        "temperature": settings["temperature"] if args.temperature is None else args.temperature,
        "top_k": settings["top_k"] if args.top_k is None else args.top_k,
    }
    if chosen["max_new_tokens"] < 1 or chosen["temperature"] < 0 or chosen["top_k"] < 0:
        raise UserError("--max-new-tokens must be >= 1, --temperature and --top-k >= 0")
    return chosen


@entry_point
def main(argv=None) -> str:
    from zoo.cli import parse_args

    args = parse_args(build_parser(), argv)

    import torch

    from gpt.inference import generate, load_model

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, recipe = load_model(args.checkpoint, device)
    tokenizer = tokenizer_beside(args.checkpoint, args.tokenizer)
    if tokenizer.get_vocab_size() > model.cfg.vocab_size:
        raise UserError(
            f"the tokenizer has {tokenizer.get_vocab_size()} ids, the model {model.cfg.vocab_size}: "
            "not the tokenizer it was trained with"
        )
    settings = generation_settings(args, recipe)
    ids = generate(
        model,
        tokenizer.encode(args.prompt).ids,
        seed=args.seed,
        stop_id=tokenizer.token_to_id(EOS),
        **settings,
    )
    text = tokenizer.decode(ids)
    print(text)
    return text


if __name__ == "__main__":
    main()
