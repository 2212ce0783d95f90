"""The generated shapes set: images of squares, discs and triangles with a COCO-format annotation
file (boxes, and masks where asked), for the tests and the CPU quick starts."""

from __future__ import annotations

# --------------------------------------------------------------------------- a generated shapes set
SHAPE_CLASSES = ("square", "disc", "triangle")
SHAPE_COLOURS = {"square": (220, 40, 40), "disc": (40, 200, 60), "triangle": (50, 80, 230)}


def make_shapes_coco(
    root, *, images: int = 32, size: int = 128, max_objects: int = 3, seed: int = 0, split: str = "train",
    masks: bool = False,
):  # fmt: skip
    """A small generated COCO-format set: coloured shapes (classes SHAPE_CLASSES) at known places, as
    ``root/<split>/`` images and ``root/annotations/instances_<split>.json``; returns both paths.

    ``masks=False`` (detection): JPEGs on a random plain background, each box the square the shape is
    drawn in. ``masks=True`` (instance segmentation): PNGs on grey whose segmentations are exactly the
    drawn pixels (squares as polygons, discs and triangles as compressed RLE: both forms COCO uses),
    each box their extent. The annotation file is written whole or not at all."""
    import json
    import random
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from zoo.io import atomic_write

    rng = random.Random(seed)
    root = Path(root)
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    coco = {
        "info": {"description": "zoo shapes"},
        "images": [],
        "annotations": [],
        "categories": [
            {"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(SHAPE_CLASSES)
        ],
    }
    for image_id in range(1, images + 1):
        background = (128, 128, 128) if masks else tuple(rng.randint(90, 160) for _ in range(3))
        image = Image.new("RGB", (size, size), background)
        for box, name in _place_shapes(rng, size, max_objects):
            shape = _draw_shape(name, box, size)
            image.paste(SHAPE_COLOURS[name], mask=shape.point(lambda v: 255 * v))
            annotation = {"id": len(coco["annotations"]) + 1, "image_id": image_id, "iscrowd": 0}
            annotation["category_id"] = SHAPE_CLASSES.index(name) + 1
            if masks:
                annotation.update(_mask_annotation(np.asarray(shape, dtype=np.uint8), name, box))
            else:
                x, y, side = box[0], box[1], box[2] - box[0]
                annotation.update(bbox=[x, y, side, side], area=float(side * side))
            coco["annotations"].append(annotation)
        file_name = f"{image_id:06d}.{'png' if masks else 'jpg'}"
        image.save(image_dir / file_name, **({} if masks else {"quality": 92}))
        coco["images"].append({"id": image_id, "file_name": file_name, "width": size, "height": size})
    annotation_file = root / "annotations" / f"instances_{split}.json"
    with atomic_write(annotation_file) as tmp:
        tmp.write_text(json.dumps(coco))
    return image_dir, annotation_file


def _place_shapes(rng, size: int, max_objects: int):
    """(box x0, y0, x1, y1, class name) of up to ``max_objects`` shapes that do not overlap."""
    placed = []
    for _ in range(rng.randint(1, max_objects)):
        for _attempt in range(20):
            side = rng.randint(size // 5, size // 2)
            x, y = rng.randint(0, size - side), rng.randint(0, size - side)
            box = (x, y, x + side, y + side)
            if all(box[2] <= p[0] or box[0] >= p[2] or box[3] <= p[1] or box[1] >= p[3] for p, _ in placed):
                break
        else:
            continue
        placed.append((box, SHAPE_CLASSES[rng.randrange(len(SHAPE_CLASSES))]))
    return placed


def _draw_shape(name: str, box, size: int):
    """The shape's pixels (an "L" image of 0 and 1) filling ``box``."""
    from PIL import Image, ImageDraw

    x, y, x1, y1 = box
    side = x1 - x
    shape = Image.new("L", (size, size), 0)
    pen = ImageDraw.Draw(shape)
    if name == "square":
        pen.rectangle([x, y, x1 - 1, y1 - 1], fill=1)
    elif name == "disc":
        pen.ellipse([x, y, x1 - 1, y1 - 1], fill=1)
    else:
        pen.polygon([(x + side / 2, y), (x, y1 - 1), (x1 - 1, y1 - 1)], fill=1)
    return shape


def _mask_annotation(pixels, name: str, box) -> dict:
    """``segmentation``, ``bbox`` and ``area`` of a drawn shape's pixels."""
    import numpy as np
    from pycocotools import mask as mask_utils

    x, y, x1, y1 = box
    if name == "square":
        # Pixel-corner polygon: pycocotools fills exactly the pixels x..x1-1, y..y1-1.
        segmentation = [[x, y, x1, y, x1, y1, x, y1]]
    else:
        rle = mask_utils.encode(np.asfortranarray(pixels))
        segmentation = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
    ys, xs = np.nonzero(pixels)
    x0, y0 = int(xs.min()), int(ys.min())
    bbox = [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0]
    return {"bbox": bbox, "area": float(pixels.sum()), "segmentation": segmentation}


def shapes_main(argv, *, description: str, masks: bool, size: int, splits=("train", "val")) -> None:
    """A model's ``python -m <package>.shapes --out DIR``: a training split of the shapes set and a
    validation split of a quarter as many images (another seed)."""
    import argparse

    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help=f"output folder ({', '.join(splits)}, annotations/)")
    parser.add_argument("--images", type=int, default=64, help="training images (validation gets a quarter)")
    parser.add_argument("--size", type=int, default=size, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    counts = (args.images, max(1, args.images // 4))
    for split, count, seed in zip(splits, counts, (args.seed, args.seed + 1), strict=True):
        image_dir, annotation_file = make_shapes_coco(
            args.out, images=count, size=args.size, seed=seed, split=split, masks=masks
        )
        print(f"{split}: {count} images in {image_dir}, annotations {annotation_file}")
