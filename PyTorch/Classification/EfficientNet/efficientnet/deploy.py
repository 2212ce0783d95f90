"""Serve a Triton model repository with tritonserver and classify images through tritonclient.

    python -m efficientnet.deploy --repository triton_repo --model efficientnet_python --protocol grpc img.jpg dir/
    python -m efficientnet.deploy --url 127.0.0.1:8000 --model efficientnet_onnx img.jpg   # a server already running
    python -m efficientnet.deploy --repository triton_repo --concurrency 1,4,16 --requests 256 img.jpg  # load

Prints the top-k class names of every image (the labels.txt the export wrote in the model's folder,
or ``--labels FILE``; the indices where there are none) and the served latency (p50/p90/p99 over the
requests, sent one at a time over one connection). Load mode (--concurrency) sends the images' requests from that
many clients at once at each level and prints throughput, p50/p99 latency and errors per level; it
exits non-zero if any request failed.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
import zoo.cli
from zoo.cli import entry_point


def preprocess(path, image_size: int) -> np.ndarray:
    """The validation transform of our recipes (efficientnet.checkpoints.default_preprocessing: short
    side to image_size + 32, bicubic, centre crop, normalise) as FP32 [3,H,W]."""
    from PIL import Image, UnidentifiedImageError
    from zoo.imagenet_loaders import IMAGENET_MEAN, IMAGENET_STD, DataError, one_line

    from efficientnet.checkpoints import default_preprocessing

    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"corrupt or unreadable image {path}: {one_line(e)}") from None
    short = default_preprocessing(image_size).resize
    scale = short / min(image.size)
    image = image.resize(
        (max(short, round(image.width * scale)), max(short, round(image.height * scale))), Image.BICUBIC
    )
    left, top = (image.width - image_size) // 2, (image.height - image_size) // 2
    image = image.crop((left, top, left + image_size, top + image_size))
    array = np.asarray(image, dtype=np.float32) / 255.0
    array = (array - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
    return np.ascontiguousarray(array.transpose(2, 0, 1))


def classify(url: str, model: str, images: list[pathlib.Path], *, image_size: int, protocol: str, top_k: int,
             class_names: list[str] | None = None, batch_size: int = 1):  # fmt: skip
    """[(path, [(class, score), ...])], latencies_ms: one request per ``batch_size`` images.

    The tensor names come from the server (``images``/``logits``, or libtorch's ``INPUT__0``/``OUTPUT__0``),
    and so does the image size where ``image_size`` is None (the exported model's input).
    """
    from zoo.classification.client import top_k as best_classes
    from zoo.triton.client import TritonClient

    predictions, latencies = [], []
    with TritonClient(url, protocol) as client:
        (input_name,), (output_name,) = client.model_io(model)
        image_size = image_size or client.input_shape(model)[-1]
        for start in range(0, len(images), batch_size):
            chunk = images[start : start + batch_size]
            batch = np.stack([preprocess(p, image_size) for p in chunk])
            began = time.perf_counter()
            logits = client.infer(model, {input_name: batch}, [output_name])[output_name]
            latencies.append(1000 * (time.perf_counter() - began))
            predictions += best_classes(chunk, logits, top_k, class_names)
    return predictions, latencies


def load(url: str, model: str, images: list[pathlib.Path], args) -> list[dict]:
    """Load mode: the images' requests (``args.batch_size`` per request) at each ``args.concurrency``."""
    from zoo.triton.client import TritonClient
    from zoo.triton.load import run_load_mode

    with TritonClient(url, args.protocol) as client:
        (input_name,), (output_name,) = client.model_io(model)
        image_size = args.image_size or client.input_shape(model)[-1]
    batches = [
        {input_name: np.stack([preprocess(p, image_size) for p in images[start : start + args.batch_size]])}
        for start in range(0, len(images), args.batch_size)
    ]
    return run_load_mode(url, model, batches, args, outputs=[output_name])


@entry_point
def main(argv=None) -> None:
    from zoo.triton.client import serve_or_connect
    from zoo.triton.load import add_load_args

    p = argparse.ArgumentParser(prog="python -m efficientnet.deploy", description=__doc__.split("\n")[0])
    p.add_argument("images", nargs="+", help="image files or folders")
    p.add_argument("--repository", default="triton_repo", help="model repository to serve (unless --url)")
    p.add_argument("--url", default=None, help="use a running server at host:port instead of starting one")
    p.add_argument("--model", default="efficientnet_python", help="model name in the repository")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument(
        "--image-size", type=int, default=None, help="centre-crop size (default: the served model's input)"
    )
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1, help="images per request")
    p.add_argument(
        "--labels", default=None,
        help="class names, one a line in the order of the logits (default: the labels.txt the export wrote)",
    )  # fmt: skip
    p.add_argument("--server-log", default=None, help="write tritonserver's output here")
    add_load_args(p)
    args = zoo.cli.parse_args(p, argv, renamed={"--classes": "--labels"})
    from zoo.classification.client import collect_images, report
    from zoo.imagenet_loaders import DataError, one_line  # after parsing: they load torch
    from zoo.triton.labels import read_labels

    try:
        images = collect_images(args.images)
        names = read_labels(args.repository, args.model, labels_file=args.labels)
        kwargs = dict(image_size=args.image_size, protocol=args.protocol, top_k=args.top_k,
                      class_names=names, batch_size=args.batch_size)  # fmt: skip

        serving = serve_or_connect(
            args.repository, args.model, url=args.url, protocol=args.protocol, log_path=args.server_log
        )
        with serving as url:
            if args.concurrency:
                outcome = load(url, args.model, images, args)
            else:
                outcome = classify(url, args.model, images, **kwargs)
    except DataError as e:
        message = one_line(e)
        raise SystemExit(message if message.startswith("error:") else f"error: {message}") from None
    if not args.concurrency:
        report(*outcome, args.protocol, args.model, names)


if __name__ == "__main__":
    main()
