"""Serve the exported model with tritonserver (or use a running one) and score the validation split
through it: the served top-1 must be training's.

    python -m skeleton.deploy --repository model_repository --data-dir data/skeleton
"""

from __future__ import annotations

import argparse

import numpy as np
from zoo.cli import entry_point

from skeleton.export import INPUT_NAME, OUTPUT_NAME


@entry_point
def main(argv=None) -> None:

    p = argparse.ArgumentParser(prog="python -m skeleton.deploy", description=__doc__.split("\n")[0])
    p.add_argument(
        "--repository", default="model_repository", help="model repository to serve (unless --url)"
    )
    p.add_argument("--url", default=None, help="use a running server at host:port instead of starting one")
    p.add_argument("--model", default="skeleton_python", help="model name in the repository")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--data-dir", default=None, help="prepared data folder ($DATA_DIR)")
    p.add_argument("--synthetic", action="store_true", help="random samples of the real shapes")
    p.add_argument("--batch-size", type=int, default=32, help="samples per request")
    args = p.parse_args(argv)

    from zoo.triton.client import TritonClient, serve_or_connect

    from skeleton.data import load_split, synthetic_split

    x, y = synthetic_split(256, 1) if args.synthetic else load_split(args.data_dir or ".", "val")
    correct = 0
    with serve_or_connect(args.repository, args.model, url=args.url, protocol=args.protocol) as url:
        client = TritonClient(url, args.protocol)
        for first in range(0, len(y), args.batch_size):
            batch = x[first : first + args.batch_size].numpy()
            logits = client.infer(args.model, {INPUT_NAME: batch}, [OUTPUT_NAME])[OUTPUT_NAME]
            correct += int((np.argmax(logits, axis=1) == y[first : first + args.batch_size].numpy()).sum())
    print(f"served top1 {100 * correct / len(y):.2f}% on {len(y)} samples ({args.model} at {url})")


if __name__ == "__main__":
    main()
