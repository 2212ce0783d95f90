"""Serve a repository written by gpt.export with tritonserver and generate through tritonclient.

    python -m gpt.deploy --repository triton_repo --prompt "The with statement"
    python -m gpt.deploy --repository triton_repo --prompt "..." --concurrency 1,4 --requests 16

Starts a local tritonserver (zoo.triton) serving ``gpt_python`` (or uses --url), tokenizes with the
repository's tokenizer.json, sends the prompt and prints the text (greedy by default, the same as
generate.sh). Load mode (--concurrency) sends that request from that many clients at once per level.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError

from gpt.data import TOKENIZER, load_tokenizer


def request_inputs(prompt_ids: list, max_new_tokens: int, temperature: float, top_k: int, seed: int) -> dict:
    return {
        "prompt_ids": np.array(prompt_ids, dtype=np.int64),
        "max_new_tokens": np.array([max_new_tokens], dtype=np.int32),
        "temperature": np.array([temperature], dtype=np.float32),
        "top_k": np.array([top_k], dtype=np.int32),
        "seed": np.array([seed], dtype=np.int64),
    }


def generate_served(url: str, inputs: dict, protocol: str = "http") -> list[int]:
    from zoo.triton.client import TritonClient

    from gpt.export import TRITON_MODEL

    with TritonClient(url, protocol) as client:
        return [int(t) for t in client.infer(TRITON_MODEL, inputs, ["token_ids"])["token_ids"]]


@entry_point
def main(argv=None):
    from zoo.triton.load import add_load_args, run_load_mode

    parser = argparse.ArgumentParser(
        prog="python -m gpt.deploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", default="triton_repo", help="from gpt.export / export_triton.sh")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default=None, help="host:port of a running server (skip starting one)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    add_load_args(parser)
    args = parser.parse_args(argv)

    from zoo.triton.client import serve_or_connect

    from gpt.export import TRITON_MODEL

    repo = pathlib.Path(args.repository)
    if not (repo / TRITON_MODEL / "config.pbtxt").is_file():
        raise UserError(f"{repo} holds no {TRITON_MODEL}/config.pbtxt: run scripts/export_triton.sh first")
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    tokenizer = load_tokenizer(repo / TOKENIZER)
    inputs = request_inputs(
        tokenizer.encode(args.prompt).ids, args.max_new_tokens, args.temperature, args.top_k, args.seed
    )
    if not inputs["prompt_ids"].size:
        raise UserError("the prompt is empty: give at least one token of text")
    with serve_or_connect(repo, TRITON_MODEL, url=args.url, protocol=args.protocol) as url:
        if args.concurrency:
            return run_load_mode(url, TRITON_MODEL, [inputs], args, outputs=["token_ids"])
        ids = generate_served(url, inputs, args.protocol)
    text = tokenizer.decode(ids)
    print(text)
    return text


if __name__ == "__main__":
    main()
