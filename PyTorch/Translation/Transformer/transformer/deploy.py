"""Serve a repository written by transformer.export with tritonserver and translate through tritonclient.

    python -m transformer.deploy --repository triton_repo --input news.en
    echo "twenty-one , four" | python -m transformer.deploy --repository triton_repo

    python -m transformer.deploy --repository triton_repo --input news.en --concurrency 1,4,16 --requests 64

Starts a local tritonserver (zoo.triton) serving ``transformer_python`` (or uses --url), tokenizes
with the repository's tokenizer.json, sends one request per batch of lines over one connection and
prints the translations. Load mode (--concurrency) sends those requests from that many clients at once
per level, prints throughput, p50/p99 latency and errors per level, and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from zoo.cli import entry_point


def translate_served(url: str, tokenizer, lines: list, protocol: str = "http", batch: int = 16) -> list:
    """Translations of ``lines`` by the served model, one request per ``batch`` lines over one connection."""
    from zoo.triton.client import TritonClient

    from transformer.export import TRITON_MODEL
    from transformer.model import EOS

    out = []
    with TritonClient(url, protocol) as client:
        for inputs in request_inputs(tokenizer, lines, batch):
            tokens = client.infer(TRITON_MODEL, inputs, ["tokens"])["tokens"]
            out.extend(tokenizer.decode([int(t) for t in row if t != EOS]) for row in tokens)
    return out


def request_inputs(tokenizer, lines: list, batch: int) -> list[dict]:
    """The requests for ``lines``: ``{"src_tokens": [n, longest]}`` INT64 of ``batch`` lines each, 0-padded."""
    from transformer.data import encode_line
    from transformer.model import PAD

    requests = []
    for start in range(0, len(lines), batch):
        encoded = [encode_line(tokenizer, line) for line in lines[start : start + batch]]
        src = np.full((len(encoded), max(len(e) for e in encoded)), PAD, dtype=np.int64)
        for row, ids in enumerate(encoded):
            src[row, : len(ids)] = ids
        requests.append({"src_tokens": src})
    return requests


@entry_point
def main(argv=None) -> list:
    """The translations (in load mode: ``load_test``'s rows, one per concurrency level)."""
    from zoo.triton.load import add_load_args, run_load_mode

    parser = argparse.ArgumentParser(
        prog="python -m transformer.deploy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--repository", default="triton_repo", help="from transformer.export / export_triton.sh"
    )
    parser.add_argument("--input", default=None, help="sentences to translate, one per line (default: stdin)")
    parser.add_argument("--url", default=None, help="host:port of a running server (skip starting one)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--batch", type=int, default=16, help="lines per request (default 16)")
    add_load_args(parser)
    args = parser.parse_args(argv)

    from transformer.export import TRITON_MODEL

    if args.batch < 1:
        raise SystemExit(f"error: --batch must be >= 1, got {args.batch}")
    repo = pathlib.Path(args.repository)
    if not (repo / TRITON_MODEL / "config.pbtxt").is_file():
        raise SystemExit(
            f"error: {repo} holds no {TRITON_MODEL}/config.pbtxt: run scripts/export_triton.sh first"
        )

    from zoo.triton.client import serve_or_connect

    from transformer.data import load_tokenizer, read_lines

    tokenizer = load_tokenizer(repo)
    given = read_lines(args.input) if args.input else sys.stdin.read().splitlines()
    lines = [line for line in given if line.strip()]
    if not lines:
        raise SystemExit(f"error: {args.input or 'stdin'} holds no sentence to translate")

    with serve_or_connect(repo, TRITON_MODEL, url=args.url, protocol=args.protocol) as url:
        if args.concurrency:
            requests = request_inputs(tokenizer, lines, args.batch)
            translations = run_load_mode(url, TRITON_MODEL, requests, args, outputs=["tokens"])
        else:
            translations = translate_served(url, tokenizer, lines, args.protocol, args.batch)
    if args.concurrency:
        return translations
    for line in translations:
        print(line)
    return translations


if __name__ == "__main__":
    main()
