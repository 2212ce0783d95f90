"""A small real detection set: scikit-learn's 1,797 handwritten digits (8x8 scans, UCI) placed on
grey canvases, one to three per image, with their boxes and digit classes in COCO format.

    python -m retinanet.digits --data-dir /tmp/digits --images 256

Layout: ``train2017/``, ``val2017/`` and ``annotations/instances_{train2017,val2017}.json``, the COCO
layout every loader of this model reads. The training and validation images draw on disjoint digits
(the first 80% of each class for training), so validation scores digits the model has not seen.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
from zoo.cli import entry_point
from zoo.io import atomic_write

MARKER = ".zoo_digits_detection.json"


def _place(rng, size: int, count: int, low: int, high: int) -> list[tuple[int, int, int]]:
    """Up to ``count`` non-overlapping squares (x, y, side) inside a ``size`` canvas."""
    placed: list[tuple[int, int, int]] = []
    for _ in range(count * 20):
        if len(placed) == count:
            break
        side = int(rng.integers(low, high + 1))
        x, y = (int(v) for v in rng.integers(0, size - side + 1, 2))
        if all(x + side <= px or px + ps <= x or y + side <= py or py + ps <= y for px, py, ps in placed):
            placed.append((x, y, side))
    return placed


def make_digits_coco(root, *, images: int = 256, size: int = 64, seed: int = 0) -> Path:
    """Write the set (``images`` training and ``images // 4`` validation canvases of ``size`` pixels)
    under ``root``; idempotent (a marker records the parameters of a finished set)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = Path(root)
    params = {"images": images, "size": size, "seed": seed}
    marker = root / MARKER
    if marker.is_file() and json.loads(marker.read_text()) == params:
        return root
    digits = load_digits()
    pixels = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    rng = np.random.default_rng(seed)
    pools = {"train2017": [], "val2017": []}
    for label in range(10):
        members = np.flatnonzero(digits.target == label)
        cut = int(len(members) * 0.8)
        pools["train2017"] += list(members[:cut])
        pools["val2017"] += list(members[cut:])
    categories = [{"id": d + 1, "name": str(d), "supercategory": "digit"} for d in range(10)]
    root.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".digits-", dir=root))
    try:
        (staging / "annotations").mkdir()
        for split, count in (("train2017", images), ("val2017", max(1, images // 4))):
            (staging / split).mkdir()
            records, annotations = [], []
            for image_id in range(1, count + 1):
                canvas = np.full((size, size), 24, np.uint8) + rng.integers(
                    0, 16, (size, size), dtype=np.uint8
                )
                for x, y, side in _place(rng, size, int(rng.integers(1, 4)), size // 4, size // 2):
                    index = int(rng.choice(pools[split]))
                    digit = Image.fromarray(pixels[index]).resize((side, side), Image.BILINEAR)
                    canvas[y : y + side, x : x + side] = np.maximum(canvas[y : y + side, x : x + side], digit)
                    annotations.append({
                        "id": len(annotations) + 1, "image_id": image_id, "category_id": int(digits.target[index]) + 1,
                        "bbox": [x, y, side, side], "area": side * side, "iscrowd": 0,
                    })  # fmt: skip
                name = f"{image_id:06d}.jpg"
                Image.fromarray(canvas).convert("RGB").save(staging / split / name, "JPEG", quality=95)
                records.append({"id": image_id, "file_name": name, "height": size, "width": size})
            data = {"images": records, "annotations": annotations, "categories": categories}
            (staging / "annotations" / f"instances_{split}.json").write_text(json.dumps(data))
        for part in ("train2017", "val2017"):
            shutil.rmtree(root / part, ignore_errors=True)
            (staging / part).rename(root / part)
        (root / "annotations").mkdir(exist_ok=True)
        for path in (staging / "annotations").iterdir():
            path.replace(root / "annotations" / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    with atomic_write(marker) as tmp:
        tmp.write_text(json.dumps(params))
    return root


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m retinanet.digits",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data-dir", required=True, help="where train2017/, val2017/, annotations/ go")
    p.add_argument("--images", type=int, default=256, help="training images (validation: a quarter)")
    p.add_argument("--size", type=int, default=64, help="canvas side in pixels")
    a = parse_args(p, argv)
    make_digits_coco(a.data_dir, images=a.images, size=a.size)
    print(f"digits detection set ({a.images} + {max(1, a.images // 4)} images) in {a.data_dir}")


if __name__ == "__main__":
    main()
