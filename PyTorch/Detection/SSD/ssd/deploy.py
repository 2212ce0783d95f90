"""Serve a model repository written by ssd.export with tritonserver and detect objects through tritonclient.

    python -m ssd.deploy --repository triton_repo --protocol grpc photo.jpg

Starts a local tritonserver (zoo.triton; the nvidia-pytriton wheel's binary carries the python
backend only, so by default just ``ssd300_python`` is served), sends the images, prints the boxes,
the served latency, and draws PNGs when --output is given. With --url, an already running server is used.
Load mode (--concurrency 1,4,16 --requests N) sends the images' request from that many clients at once
per level, prints throughput, p50/p99 latency and errors per level, and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from zoo.cli import entry_point

MODEL = "ssd300_python"
OUTPUTS = ["detection_boxes", "detection_scores", "detection_labels", "num_detections"]


@entry_point
def main(argv=None) -> None:
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--repository", default="triton_repo", help="from ssd.export / export_triton.sh")
    p.add_argument("--url", help="host:port of a running server (skip starting one)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--threshold", type=float, default=0.4)
    p.add_argument("--output", help="folder for PNGs with the boxes drawn")
    add_load_args(p)
    a = p.parse_args(argv)

    import torch
    from zoo.triton.client import serve_or_connect

    from ssd.boxes import Detections
    from ssd.detect import draw, load_images

    pil, batch = load_images(a.images)
    inputs = {"images": batch.numpy().astype(np.float32)}

    with serve_or_connect(a.repository, MODEL, url=a.url, protocol=a.protocol) as url:
        if a.concurrency:
            outcome = run_load_mode(url, MODEL, [inputs], a, outputs=OUTPUTS)
        else:
            outcome = timed_infer(url, inputs, a.protocol)
    if a.concurrency:
        return
    out, ms = outcome
    print(f"served latency: {ms:.1f} ms for {len(a.images)} image(s) over {a.protocol}", file=sys.stderr)
    for i, path in enumerate(a.images):
        n = int(out["num_detections"][i, 0])
        det = Detections(*(torch.from_numpy(out[k][i, :n].copy()) for k in OUTPUTS[:3]))
        keep = det.scores >= a.threshold
        print(f"{path}: {int(keep.sum())} objects >= {a.threshold}")
        for box, score, label in zip(
            det.boxes[keep].tolist(), det.scores[keep].tolist(), det.labels[keep].tolist(), strict=True
        ):
            print(f"  class {label} {score:.3f} [{', '.join(f'{v:.3f}' for v in box)}]")
        if a.output:
            Path(a.output).mkdir(parents=True, exist_ok=True)
            draw(pil[i], det, {}, a.threshold).save(Path(a.output) / (Path(path).stem + ".png"))


def timed_infer(url, inputs, protocol):
    """The outputs and latency (ms) of one request, after an untimed warm-up on the same connection."""
    from zoo.triton.client import TritonClient

    with TritonClient(url, protocol) as client:
        client.infer(MODEL, inputs, OUTPUTS)
        t = time.perf_counter()
        out = client.infer(MODEL, inputs, OUTPUTS)
        return out, (time.perf_counter() - t) * 1000


if __name__ == "__main__":
    main()
