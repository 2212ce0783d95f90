"""Serve a model repository written by retinanet.export with tritonserver and detect objects through
tritonclient.

    python -m retinanet.deploy --repository triton_repo --image-size 800 photo.jpg

Starts a local tritonserver (zoo.triton; the nvidia-pytriton wheel's binary carries the python backend
only, so ``retinanet_python`` is served), sends the images, prints the boxes and the served latency.
With --url, an already running server is used. Load mode (--concurrency 1,4,16 --requests N) prints
throughput, p50/p99 latency and errors per level.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from zoo.cli import entry_point

MODEL = "retinanet_python"
OUTPUTS = ["detection_boxes", "detection_scores", "detection_labels", "num_detections"]


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(
        prog="python -m retinanet.deploy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--repository", default="triton_repo", help="from retinanet.export / export_triton.sh")
    p.add_argument("--url", help="host:port of a running server (skip starting one)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument(
        "--image-size", type=int, default=800, help="side the images are resized to (the training's)"
    )
    p.add_argument("--threshold", type=float, default=0.4)
    add_load_args(p)
    a = parse_args(p, argv)

    from zoo.triton.client import serve_or_connect

    from retinanet.detect import load_images

    _, batch = load_images(a.images, a.image_size)
    inputs = {"images": batch.numpy().astype(np.float32)}
    with serve_or_connect(a.repository, MODEL, url=a.url, protocol=a.protocol) as url:
        if a.concurrency:
            run_load_mode(url, MODEL, [inputs], a, outputs=OUTPUTS)
            return
        out, ms = timed_infer(url, inputs, a.protocol)
    print(f"served latency: {ms:.1f} ms for {len(a.images)} image(s) over {a.protocol}", file=sys.stderr)
    for i, path in enumerate(a.images):
        n = int(out["num_detections"][i, 0])
        scores = out["detection_scores"][i, :n]
        keep = scores >= a.threshold
        print(f"{path}: {int(keep.sum())} objects >= {a.threshold}")
        for box, score, label in zip(
            out["detection_boxes"][i, :n][keep],
            scores[keep],
            out["detection_labels"][i, :n][keep],
            strict=True,
        ):
            print(f"  class {int(label)} {score:.3f} [{', '.join(f'{v:.1f}' for v in box)}]")


def timed_infer(url, inputs, protocol):
    """The outputs and latency (ms) of one request, after an untimed warm-up on the same connection."""
    from zoo.triton.client import TritonClient

    with TritonClient(url, protocol) as client:
        client.infer(MODEL, inputs, OUTPUTS)
        started = time.perf_counter()
        out = client.infer(MODEL, inputs, OUTPUTS)
        return out, (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
