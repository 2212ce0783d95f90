"""Serve a Triton model repository with tritonserver and classify images through tritonclient.

    python -m resnet50_tf.deploy --model-repository model_repository --images a.jpg b.jpg
    python -m resnet50_tf.deploy --model-repository model_repository --data-dir /data/tfrecords --count 64

Without --url a local tritonserver (the nvidia-pytriton wheel's, or $TRITONSERVER) is started on
127.0.0.1 and stopped at the end; that server has only the python backend, so the default model is
resnet50_tf_python. With --url the running server there is used (e.g. NVIDIA's Triton container,
which also serves resnet50_tf_savedmodel and resnet50_tf_onnx). Requests go one at a time over one
connection. Load mode (--concurrency 1,4,16 --requests N) sends the images' requests from that many
clients at once per level, prints throughput, p50/p99 latency and errors per level, and exits
non-zero if any request failed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError, one_line


def load_images(paths: list[str], image_size: int) -> np.ndarray:
    """The images, preprocessed as for evaluation: float32 NHWC (``to_nchw`` gives the served layout)."""
    import tensorflow as tf

    from resnet50_tf.data import eval_image

    batch = []
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"image not found: {path}")
        data = Path(path).read_bytes()
        try:
            image = tf.io.decode_image(data, channels=3, expand_animations=False)
            encoded = tf.io.encode_jpeg(image)
            batch.append(eval_image(encoded, image_size).numpy())
        except tf.errors.InvalidArgumentError:
            raise UserError(f"not a readable image: {path}") from None
    return np.stack(batch)


def load_validation(data_dir: str, image_size: int, count: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    from resnet50_tf.data import build_eval_dataset, read_dataset_info
    from resnet50_tf.tfrecords import check_dataset

    info = read_dataset_info(data_dir)
    check_dataset(info, ["val"])
    images, labels = [], []
    for x, y in build_eval_dataset(info, min(count, 64), image_size):
        images.append(x.numpy())
        labels.append(y.numpy())
        if sum(len(b) for b in images) >= count:
            break
    return np.concatenate(images)[:count], np.concatenate(labels)[:count], info.classes


def to_nchw(images: np.ndarray) -> np.ndarray:
    """NHWC images (the Keras layout) in the NCHW layout the served models take."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def classify(
    url: str, model: str, images: np.ndarray, protocol: str, batch_size: int
) -> tuple[np.ndarray, list]:
    """Logits for every image (NCHW), sent in batches over one connection; and each request's latency (ms)."""
    from zoo.triton.client import TritonClient

    logits, latencies = [], []
    with TritonClient(url, protocol) as client:
        for start in range(0, len(images), batch_size):
            t0 = time.perf_counter()
            out = client.infer(model, {"images": images[start : start + batch_size]}, ["logits"])
            latencies.append(1000 * (time.perf_counter() - t0))
            logits.append(out["logits"])
    return np.concatenate(logits), latencies


@entry_point
def main(argv=None) -> dict:
    from zoo.triton.load import add_load_args

    p = argparse.ArgumentParser(
        prog="deploy_triton.sh",
        description="Serve a Triton model repository (tritonserver) and classify images with tritonclient.",
    )
    p.add_argument("--model-repository", default="model_repository")
    p.add_argument("--model", default="resnet50_tf_python", help="model name in the repository")
    p.add_argument("--images", nargs="*", default=[], help="image files to classify")
    p.add_argument("--data-dir", help="classify the first --count validation images of these TFRecords")
    p.add_argument("--synthetic", action="store_true", help="send --count random images")
    p.add_argument("--count", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8, help="images per request")
    p.add_argument("--protocol", choices=["http", "grpc"], default="http")
    p.add_argument("--url", help="use the server at host:port instead of starting one")
    p.add_argument("--python-env", help="venv whose python runs python-backend models (default: this one)")
    p.add_argument(
        "--labels",
        help="class names, one a line in the order of the logits (default: the model's labels.txt)",
    )
    add_load_args(p)
    args = p.parse_args(argv)
    for flag in ("count", "batch_size"):
        if getattr(args, flag) < 1:
            raise SystemExit(
                f"error: --{flag.replace('_', '-')} must be a positive integer, not {getattr(args, flag)}"
            )
    repo = Path(args.model_repository)
    config = repo / args.model / "config.pbtxt"
    if not config.is_file():
        raise SystemExit(f"{config} not found: run scripts/export_triton.sh first")
    if not args.images and not args.data_dir and not args.synthetic:
        raise SystemExit("nothing to classify: pass --images FILE..., --data-dir TFRECORDS or --synthetic")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.bench import percentiles
    from zoo.triton.client import serve_or_connect
    from zoo.triton.labels import label_of, read_labels
    from zoo.triton.load import run_load_mode
    from zoo.triton.repository import parse_pbtxt

    try:
        model_config = parse_pbtxt(config.read_text())
        image_size = int(model_config.input[0].dims[-1])
    except (ValueError, IndexError) as e:
        reason = one_line(e, limit=200) if str(e).strip() else "it declares no input dims"
        raise SystemExit(f"error: {config} is not a valid model configuration: {reason}") from None
    labels = None
    if args.synthetic:
        rng = np.random.default_rng(0)
        images = rng.standard_normal((args.count, 3, image_size, image_size)).astype(np.float32)
        names, classes = [f"random[{i}]" for i in range(args.count)], None
    elif args.data_dir:
        images, labels, classes = load_validation(args.data_dir, image_size, args.count)
        images, names = to_nchw(images), [f"val[{i}]" for i in range(len(images))]
    else:
        images, names, classes = to_nchw(load_images(args.images, image_size)), args.images, None
    classes = read_labels(repo, args.model, labels_file=args.labels) or classes

    serving = serve_or_connect(
        repo, args.model, url=args.url, protocol=args.protocol, python_env=args.python_env
    )
    with serving as url:
        if args.concurrency:
            batches = [
                {"images": images[i : i + args.batch_size]} for i in range(0, len(images), args.batch_size)
            ]
            outcome = run_load_mode(url, args.model, batches, args, outputs=["logits"])
        else:
            outcome = classify(url, args.model, images, args.protocol, args.batch_size)
    if args.concurrency:
        return {"load": outcome}
    logits, latencies = outcome
    top1 = logits.argmax(-1)
    for name, k in zip(names, top1, strict=True):
        print(f"{name}: {label_of(classes, k)}")
    stats = percentiles(latencies, (50, 99))
    result = {"images": len(images), "latency_ms_p50": stats["p50"], "latency_ms_p99": stats["p99"]}
    if labels is not None:
        result["top1"] = float(100 * np.mean(top1 == labels))
    print(
        f"{args.model} over {args.protocol}: {len(images)} images in requests of {args.batch_size}, "
        f"latency p50 {result['latency_ms_p50']:.1f} ms p99 {result['latency_ms_p99']:.1f} ms"
        + (f", top-1 {result['top1']:.1f}%" if labels is not None else "")
    )
    return result


if __name__ == "__main__":
    main()
