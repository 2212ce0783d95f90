"""An ImageNet-shaped folder of generated JPEGs, for timing the input pipelines (``benchmark.sh
--make-jpegs N``): no download, files of ImageNet's average size."""

from __future__ import annotations

import json
import os
import pathlib
from concurrent.futures import ProcessPoolExecutor


def make_jpeg_set(
    root,
    *,
    unique: int = 12800,
    samples: int = 51200,
    classes: int = 100,
    size=(500, 375),
    quality: int = 90,
    workers: int | None = None,
) -> dict:
    """An ImageNet-shaped folder of generated JPEGs for pipeline benchmarks.

    ``unique`` distinct images (smooth colour fields, ellipses and noise: about 110 KB each at
    500x375 and quality 90, near ImageNet's average file) are written once under ``_unique/``;
    ``train/<class>/`` holds ``samples`` symbolic links to them, so an epoch is long enough that
    the loader's per-epoch restart stays out of the timing. ``val/`` links the first images.
    """
    root = pathlib.Path(root)
    classes = min(classes, unique)
    done = root / ".complete"
    if done.exists():
        return json.loads(done.read_text())
    unique_dir = root / "_unique"
    unique_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(str(unique_dir / f"{i:06d}.jpg"), i, size, quality) for i in range(unique)]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        sizes = list(pool.map(_write_jpeg, jobs, chunksize=64))
    for split, count in (("train", max(samples, classes)), ("val", max(classes, min(unique, 50 * classes)))):
        for k in range(count):
            folder = root / split / f"c{k % classes:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            link = folder / f"{k:07d}.jpg"
            if not link.is_symlink():
                link.symlink_to(unique_dir / f"{k % unique:06d}.jpg")
    info = {"unique": unique, "samples": samples, "classes": classes, "size": list(size),
            "mean_kb": sum(sizes) / len(sizes) / 1e3}  # fmt: skip
    done.write_text(json.dumps(info))
    return info


def _write_jpeg(job) -> int:
    import numpy as np
    from PIL import Image, ImageDraw

    path, seed, (width, height), quality = job
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    image = Image.fromarray(colours).resize((width, height), Image.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(10, 200)), y0 + int(rng.integers(10, 150))
        draw.ellipse([x0, y0, x1, y1], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, 24, (height, width, 3)).astype(np.float32)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path + ".tmp", "JPEG", quality=quality)
    os.replace(path + ".tmp", path)
    return os.path.getsize(path)
