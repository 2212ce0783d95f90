"""The image classifiers' Triton client side (ResNet-50, EfficientNet ``deploy.py``): the images asked
about, each answer's top-k class names and scores, and the report they print.

    images = collect_images(["img.jpg", "val/"])
    predictions = top_k(images, logits, 3, names)   # names: zoo.triton.labels.read_labels(...)
    report(predictions, latencies, "grpc", "resnet50_python", names)

Numpy only (no framework): the deploy clients import it after parsing their flags.
"""

from __future__ import annotations

import pathlib

import numpy as np

from zoo.bench import percentiles
from zoo.triton.labels import label_of


def collect_images(paths: list[str]) -> list[pathlib.Path]:
    """The image files of ``paths`` (files, or folders searched recursively, sorted); DataError where a path
    is missing or no image is found."""
    from zoo.imagenet_loaders import IMAGE_EXTENSIONS, DataError

    images = []
    for item in paths:
        path = pathlib.Path(item)
        if path.is_dir():
            images += sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
        elif path.is_file():
            images.append(path)
        else:
            raise DataError(f"image or folder {path} does not exist")
    if not images:
        raise DataError(f"no images found in {', '.join(paths)}")
    return images


def top_k(chunk, logits: np.ndarray, k: int, names: list[str] | None) -> list:
    """[(path, [(class name, probability), ...])] of each image of ``chunk`` from its row of ``logits``;
    the class's index stands for its name where there are no ``names``."""
    predictions = []
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = shifted / shifted.sum(axis=1, keepdims=True)
    for path, row in zip(chunk, probs, strict=True):
        best = np.argsort(-row, kind="stable")[:k]
        predictions.append((path, [(label_of(names, i), float(row[i])) for i in best]))
    return predictions


def report(predictions, latencies, protocol: str, model: str, names: list[str] | None = None) -> dict:
    """Print each image's top-k (``path: name (score), ...``), the agreement with the folder labels of
    images inside a folder named after a class (``val/<class>/x.jpg``), and the latency percentiles;
    returns {"top1_agrees", "labelled"} (None, 0 without such images)."""
    labelled = matched = 0
    for path, top in predictions:
        print(f"{path}: " + ", ".join(f"{name} ({score:.3f})" for name, score in top))
        if names and path.parent.name in names:
            labelled += 1
            matched += top[0][0] == path.parent.name
    if labelled:
        print(
            f"top-1 agrees with the folder label for {matched}/{labelled} images ({100 * matched / labelled:.1f}%)"
        )
    stats = percentiles(latencies)
    print(
        f"{model} over {protocol}: {len(latencies)} requests, latency p50 {stats['p50']:.1f} ms, "
        f"p90 {stats['p90']:.1f} ms, p99 {stats['p99']:.1f} ms"
    )
    return {"top1_agrees": 100 * matched / labelled if labelled else None, "labelled": labelled}
