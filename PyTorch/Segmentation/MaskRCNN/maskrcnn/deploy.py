"""Serve a model repository written by maskrcnn.export with tritonserver and segment images through
tritonclient.

    python -m maskrcnn.deploy --repository triton_repo --protocol grpc --output out/ photo.jpg

Starts a local tritonserver (zoo.triton; the nvidia-pytriton wheel's binary carries the python backend
only, so ``maskrcnn_python`` is served), sends each image over one connection, prints the detections
and the served latency, and draws PNGs when --output is given. With --url, an already running server is
used. Load mode (--concurrency 1,4,16 --requests N) sends the images' requests from that many clients at
once per level, prints throughput, p50/p99 latency and errors per level, and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError

MODEL = "maskrcnn_python"


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.deploy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--repository", default="triton_repo", help="from maskrcnn.export / export_triton.sh")
    p.add_argument("--url", help="host:port of a running server (skip starting one)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--threshold", type=float, default=0.5)
    p.add_argument("--output", help="folder for PNGs with boxes and masks drawn")
    add_load_args(p)
    a = parse_args(p, argv)
    repo = Path(a.repository)
    if not a.url and not (repo / MODEL / "config.pbtxt").is_file():
        raise UserError(f"{repo} holds no {MODEL}/config.pbtxt: run scripts/export_triton.sh first")

    import torch  # once the repository has passed its check
    from zoo.triton.client import serve_or_connect

    from maskrcnn.detect import count_line, draw, load_image
    from maskrcnn.export import OUTPUTS

    loaded = [load_image(path) for path in a.images]

    with serve_or_connect(repo, MODEL, url=a.url, protocol=a.protocol) as url:
        if a.concurrency:
            requests = [{"image": image.numpy().astype(np.float32)} for _, image in loaded]
            answers = run_load_mode(url, MODEL, requests, a, outputs=list(OUTPUTS))
        else:
            answers = serve_all(url, loaded, a.protocol)
    if a.concurrency:
        return
    for path, (im, _), (out, ms) in zip(a.images, loaded, answers, strict=True):
        keep = out["scores"] >= a.threshold
        print(f"{path}: {count_line(out['scores'], a.threshold)} ({ms:.1f} ms over {a.protocol})")
        for box, score, label in zip(
            out["boxes"][keep].tolist(),
            out["scores"][keep].tolist(),
            out["labels"][keep].tolist(),
            strict=True,
        ):
            print(f"  class {label} {score:.3f} [{', '.join(f'{v:.1f}' for v in box)}]")
        if a.output:
            Path(a.output).mkdir(parents=True, exist_ok=True)
            draw(im, {k: torch.from_numpy(v.copy()) for k, v in out.items()}, {}, a.threshold).save(
                Path(a.output) / (Path(path).stem + ".png")
            )


def serve_all(url, loaded, protocol) -> list[tuple[dict, float]]:
    """(outputs, milliseconds) per image over one connection; the first image is sent once before as warm-up."""
    from zoo.triton.client import TritonClient

    from maskrcnn.export import OUTPUTS

    answers = []
    with TritonClient(url, protocol) as client:
        client.infer(MODEL, {"image": loaded[0][1].numpy().astype(np.float32)}, list(OUTPUTS))
        for _, image in loaded:
            began = time.perf_counter()
            out = client.infer(MODEL, {"image": image.numpy().astype(np.float32)}, list(OUTPUTS))
            answers.append((out, (time.perf_counter() - began) * 1000))
    return answers


if __name__ == "__main__":
    main()
