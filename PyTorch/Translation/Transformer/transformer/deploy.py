"""Serve a repository written by transformer.export with tritonserver and translate through tritonclient.

    python -m transformer.deploy --repository triton_repo --input news.en
    echo "twenty-one , four" | python -m transformer.deploy --repository triton_repo

Starts a local tritonserver (zoo.triton) serving ``transformer_python`` (or uses --url), tokenizes
with the repository's tokenizer.json, sends one request per batch of lines and prints the translations.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile

import numpy as np

from transformer.export import TRITON_MODEL


def translate_served(url: str, tokenizer, lines: list, protocol: str = "http", batch: int = 16) -> list:
    """Translations of ``lines`` by the served model (batches of ``batch`` lines, 0-padded)."""
    from zoo.triton import infer

    from transformer.data import encode_line
    from transformer.model import EOS, PAD

    out = []
    for start in range(0, len(lines), batch):
        encoded = [encode_line(tokenizer, line) for line in lines[start : start + batch]]
        src = np.full((len(encoded), max(len(e) for e in encoded)), PAD, dtype=np.int64)
        for row, ids in enumerate(encoded):
            src[row, : len(ids)] = ids
        tokens = infer(url, TRITON_MODEL, {"src_tokens": src}, ["tokens"], protocol=protocol)["tokens"]
        out.extend(tokenizer.decode([int(t) for t in row if t != EOS]) for row in tokens)
    return out


def main(argv=None) -> list:
    from zoo.triton import TritonServer

    from transformer.data import load_tokenizer

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
    args = parser.parse_args(argv)
    repo = pathlib.Path(args.repository)
    if not (repo / TRITON_MODEL / "config.pbtxt").is_file():
        raise SystemExit(
            f"error: {repo} holds no {TRITON_MODEL}/config.pbtxt: run scripts/export_triton.sh first"
        )
    tokenizer = load_tokenizer(repo)
    if args.input and not pathlib.Path(args.input).is_file():
        raise SystemExit(f"error: {args.input}: no such file")
    text = pathlib.Path(args.input).read_text(encoding="utf-8") if args.input else sys.stdin.read()
    lines = [line for line in text.splitlines() if line.strip()]
    if args.url:
        translations = translate_served(args.url, tokenizer, lines, args.protocol)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(repo / TRITON_MODEL, pathlib.Path(tmp) / TRITON_MODEL)
            try:
                # The server stops on every way out of this block: an error, Ctrl-C, SIGTERM.
                with TritonServer(tmp) as server:
                    url = server.http_url if args.protocol == "http" else server.grpc_url
                    print(
                        f"tritonserver ready: HTTP {server.http_url}  gRPC {server.grpc_url}", file=sys.stderr
                    )
                    translations = translate_served(url, tokenizer, lines, args.protocol)
            except RuntimeError as e:  # its first line names the cause, the rest is the log's tail
                raise SystemExit(f"error: {str(e).splitlines()[0]}") from None
    for line in translations:
        print(line)
    return translations


if __name__ == "__main__":
    main()
