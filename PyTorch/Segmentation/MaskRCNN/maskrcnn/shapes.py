"""A small generated instance-segmentation set: coloured shapes on a plain background, written as PNG
images plus a COCO-format annotation file whose masks are exactly the drawn pixels. Squares carry
polygon segmentations, discs and triangles compressed RLE (both forms COCO uses). Used by the tests
and by ``download_data.sh --synthetic``.

    python -m maskrcnn.shapes --out /tmp/shapes --images 64
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
from zoo.cli import entry_point

CLASSES = ("square", "disc", "triangle")
COLOURS = {"square": (220, 40, 40), "disc": (40, 200, 60), "triangle": (50, 80, 230)}


def make_shapes_coco(
    root, *, images: int = 32, size: int = 128, max_objects: int = 3, seed: int = 0, split: str = "train"
) -> tuple[Path, Path]:
    """Write ``root/<split>/*.png`` and ``root/annotations/instances_<split>.json``; return both paths."""
    from PIL import Image, ImageDraw
    from pycocotools import mask as mask_utils

    rng = random.Random(seed)
    root = Path(root)
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(exist_ok=True)
    coco = {
        "info": {"description": "zoo shapes"},
        "images": [],
        "annotations": [],
        "categories": [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(CLASSES)],
    }
    for img_id in range(1, images + 1):
        im = Image.new("RGB", (size, size), (128, 128, 128))
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
            shape = Image.new("L", (size, size), 0)
            pen = ImageDraw.Draw(shape)
            if name == "square":
                pen.rectangle([x, y, x + s - 1, y + s - 1], fill=1)
                # Pixel-corner polygon: pycocotools fills exactly the pixels x..x+s-1, y..y+s-1.
                segmentation = [[x, y, x + s, y, x + s, y + s, x, y + s]]
            elif name == "disc":
                pen.ellipse([x, y, x + s - 1, y + s - 1], fill=1)
            else:
                pen.polygon([(x + s / 2, y), (x, y + s - 1), (x + s - 1, y + s - 1)], fill=1)
            pixels = np.asarray(shape, dtype=np.uint8)
            im.paste(COLOURS[name], mask=shape.point(lambda v: 255 * v))
            if name != "square":
                rle = mask_utils.encode(np.asfortranarray(pixels))
                segmentation = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
            ys, xs = np.nonzero(pixels)
            x0, y0 = int(xs.min()), int(ys.min())
            coco["annotations"].append(
                {
                    "id": len(coco["annotations"]) + 1,
                    "image_id": img_id,
                    "category_id": cls + 1,
                    "bbox": [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0],
                    "area": float(pixels.sum()),
                    "iscrowd": 0,
                    "segmentation": segmentation,
                }
            )
        name = f"{img_id:06d}.png"
        im.save(image_dir / name)
        coco["images"].append({"id": img_id, "file_name": name, "width": size, "height": size})
    ann = root / "annotations" / f"instances_{split}.json"
    tmp = ann.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(coco))
    tmp.replace(ann)
    return image_dir, ann


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (train2017/, val2017/, annotations/)")
    p.add_argument("--images", type=int, default=64, help="training images (validation gets a quarter)")
    p.add_argument("--size", type=int, default=128, help="image side in pixels")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for split, n, seed in (("train2017", a.images, a.seed), ("val2017", max(1, a.images // 4), a.seed + 1)):
        d, ann = make_shapes_coco(a.out, images=n, size=a.size, seed=seed, split=split)
        print(f"{split}: {n} images in {d}, annotations {ann}")


if __name__ == "__main__":
    main()
