"""Detect objects in images with a RetinaNet checkpoint and draw the boxes and class names into PNGs.

python -m retinanet.detect --checkpoint results/model.pt --output out/ photo1.jpg photo2.jpg
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.cli import entry_point
from zoo.coco import PALETTE, read_image


def load_images(paths: list[str], image_size: int):
    """PIL images and the normalised ``(N, 3, S, S)`` batch the model takes."""
    import torch
    from torchvision.transforms.v2 import functional as F

    from retinanet.model import MEAN, STD

    pil, batch = [], []
    for path in paths:
        image = read_image(path)
        pil.append(image)
        tensor = F.resize(F.pil_to_tensor(image), [image_size, image_size], antialias=True)
        batch.append(F.normalize(F.to_dtype(tensor, torch.float32, scale=True), MEAN, STD))
    return pil, torch.stack(batch)


def draw(image, boxes, scores, labels, names: dict[int, str], threshold: float, image_size: int):
    """A copy of ``image`` with the detections scoring at least ``threshold`` drawn (boxes in input pixels)."""
    from PIL import ImageDraw

    out = image.copy()
    pen = ImageDraw.Draw(out)
    w, h = out.size
    for box, score, label in zip(boxes.tolist(), scores.tolist(), labels.tolist(), strict=True):
        if score < threshold:
            continue
        colour = PALETTE[label % len(PALETTE)]
        x1, y1, x2, y2 = (box[0] * w / image_size, box[1] * h / image_size, box[2] * w / image_size,
                          box[3] * h / image_size)  # fmt: skip
        pen.rectangle([x1, y1, x2, y2], outline=colour, width=max(1, w // 200))
        pen.text((x1 + 2, y1 + 1), f"{names.get(label, str(label))} {score:.2f}", fill=colour)
    return out


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m retinanet.detect",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("images", nargs="+", help="image files (JPEG, PNG, ...)")
    p.add_argument("--checkpoint", required=True, help="model.pt or checkpoint.pt from retinanet.train")
    p.add_argument("--output", default="detections", help="folder for <image name>.png")
    p.add_argument("--threshold", type=float, default=0.4, help="draw boxes scoring at least this")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where a GPU is visible)")
    a = parse_args(p, argv)

    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")

    from retinanet.evaluate import load_model
    from retinanet.model import detect

    model, info = load_model(a.checkpoint, a.device)
    names = {i: str(info["category_names"].get(cid, cid)) for i, cid in enumerate(info["category_ids"])}
    size = info["image_size"]
    pil, batch = load_images(a.images, size)
    with torch.no_grad():
        found = detect(model.eval(), batch.to(a.device))
    out_dir = Path(a.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, image, (boxes, scores, labels) in zip(a.images, pil, found, strict=True):
        boxes, scores, labels = boxes.cpu(), scores.cpu(), labels.cpu()
        target = out_dir / (Path(path).stem + ".png")
        draw(image, boxes, scores, labels, names, a.threshold, size).save(target)
        kept = scores >= a.threshold
        print(f"{path}: {int(kept.sum())} objects >= {a.threshold} -> {target}", file=sys.stderr)
        for box, score, label in zip(
            boxes[kept].tolist(), scores[kept].tolist(), labels[kept].tolist(), strict=True
        ):
            print(f"  {names.get(label, label)} {score:.3f} [{', '.join(f'{v:.1f}' for v in box)}]")


if __name__ == "__main__":
    main()
