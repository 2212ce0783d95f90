"""A small generated detection set: coloured shapes with known boxes on noisy backgrounds, written as
images plus a COCO-format annotation file. Used by the tests and the quick-start smoke run.

    python -m ssd.shapes --out /tmp/shapes --images 64
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from zoo.cli import entry_point

CLASSES = ("square", "disc", "triangle")
COLOURS = {"square": (220, 40, 40), "disc": (40, 200, 60), "triangle": (50, 80, 230)}


def make_shapes_coco(
    root, *, images: int = 32, size: int = 160, max_objects: int = 3, seed: int = 0, split: str = "train"
) -> tuple[Path, Path]:
    """Write ``root/<split>/*.jpg`` and ``root/annotations/instances_<split>.json``; return both paths."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    root = Path(root)
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(exist_ok=True)
    coco = {
        "images": [],
        "annotations": [],
        "categories": [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(CLASSES)],
    }
    for img_id in range(1, images + 1):
        bg = tuple(rng.randint(90, 160) for _ in range(3))
        im = Image.new("RGB", (size, size), bg)
        draw = ImageDraw.Draw(im)
        placed: list[tuple[int, int, int, int]] = []
        for _ in range(rng.randint(1, max_objects)):
            for _attempt in range(20):
                s = rng.randint(size // 5, size // 2)
                x, y = rng.randint(0, size - s), rng.randint(0, size - s)
                box = (x, y, x + s, y + s)
                if all(box[2] <= p[0] or box[0] >= p[2] or box[3] <= p[1] or box[1] >= p[3] for p in placed):
                    break
            else:
                continue
            placed.append(box)
            cls = rng.randrange(len(CLASSES))
            name = CLASSES[cls]
            if name == "square":
                draw.rectangle([x, y, x + s - 1, y + s - 1], fill=COLOURS[name])
            elif name == "disc":
                draw.ellipse([x, y, x + s - 1, y + s - 1], fill=COLOURS[name])
            else:
                draw.polygon([(x + s / 2, y), (x, y + s - 1), (x + s - 1, y + s - 1)], fill=COLOURS[name])
            coco["annotations"].append(
                {
                    "id": len(coco["annotations"]) + 1,
                    "image_id": img_id,
                    "category_id": cls + 1,
                    "bbox": [x, y, s, s],
                    "area": float(s * s),
                    "iscrowd": 0,
                }
            )
        name = f"{img_id:06d}.jpg"
        im.save(image_dir / name, quality=92)
        coco["images"].append({"id": img_id, "file_name": name, "width": size, "height": size})
    ann = root / "annotations" / f"instances_{split}.json"
    tmp = ann.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(coco))
    tmp.replace(ann)
    return image_dir, ann


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (train/, val/, annotations/)")
    p.add_argument("--images", type=int, default=64, help="training images (validation gets a quarter)")
    p.add_argument("--size", type=int, default=160, help="image side in pixels")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for split, n, seed in (("train", a.images, a.seed), ("val", max(1, a.images // 4), a.seed + 1)):
        d, ann = make_shapes_coco(a.out, images=n, size=a.size, seed=seed, split=split)
        print(f"{split}: {n} images in {d}, annotations {ann}")


if __name__ == "__main__":
    main()
