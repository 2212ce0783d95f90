"""Serve a repository written by rnnt.export with tritonserver and transcribe audio files through tritonclient.

    python -m rnnt.deploy --repository triton_repo speech.flac [more.wav ...]
    python -m rnnt.deploy --repository triton_repo speech.flac --concurrency 1,4,16 --requests 64

Starts a local tritonserver (zoo.triton) serving ``rnnt_python`` (or uses --url), sends each file as
one request (``audio`` fp32 16 kHz, ``audio_lengths``) and prints the transcript (one line per file,
as scripts/transcribe.sh does), decoding tokens with the repository's tokenizer.model. Load mode
(--concurrency) sends those requests from that many clients at once per level, prints throughput,
p50/p99 latency and errors per level, and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError


def request_inputs(audio: list) -> list[dict]:
    """One request per utterance: ``{"audio": (1, L) fp32, "audio_lengths": (1,) int64}``."""
    return [
        {"audio": np.asarray(a, dtype=np.float32)[None], "audio_lengths": np.array([len(a)], dtype=np.int64)}
        for a in audio
    ]


def transcribe_served(url: str, tokenizer, audio: list, protocol: str = "http") -> list[str]:
    """Transcripts of ``audio`` (16 kHz float arrays) by the served model, over one connection."""
    from zoo.triton.client import TritonClient

    from rnnt.export import TRITON_MODEL

    texts = []
    with TritonClient(url, protocol) as client:
        for inputs in request_inputs(audio):
            tokens = client.infer(TRITON_MODEL, inputs, ["tokens"])["tokens"][0]
            texts.append(tokenizer.decode([int(t) for t in tokens if t >= 0]))
    return texts


@entry_point
def main(argv=None) -> list:
    """The transcripts (in load mode: ``load_test``'s rows, one per concurrency level)."""
    from zoo.triton.load import add_load_args, run_load_mode

    parser = argparse.ArgumentParser(
        prog="scripts/deploy_triton.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("audio", nargs="*", help="16 kHz WAV or FLAC files")
    parser.add_argument("--repository", default="triton_repo", help="from rnnt.export / export_triton.sh")
    parser.add_argument("--url", default=None, help="host:port of a running server (skip starting one)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    add_load_args(parser)
    args = parser.parse_args(argv)

    from zoo.triton.client import serve_or_connect

    from rnnt.data import load_tokenizer, read_audio
    from rnnt.export import TRITON_MODEL

    repo = pathlib.Path(args.repository)
    if not (repo / TRITON_MODEL / "config.pbtxt").is_file():
        raise UserError(f"{repo} holds no {TRITON_MODEL}/config.pbtxt: run scripts/export_triton.sh first")
    if not args.audio:
        raise UserError("name one or more audio files to transcribe")
    tokenizer = load_tokenizer(repo / "tokenizer.model")
    audio = [read_audio(path) for path in args.audio]
    with serve_or_connect(repo, TRITON_MODEL, url=args.url, protocol=args.protocol) as url:
        if args.concurrency:
            return run_load_mode(url, TRITON_MODEL, request_inputs(audio), args, outputs=["tokens"])
        texts = transcribe_served(url, tokenizer, audio, args.protocol)
    for path, text in zip(args.audio, texts, strict=True):
        print(f"{path}\t{text}" if len(args.audio) > 1 else text)
    return texts


if __name__ == "__main__":
    main()
