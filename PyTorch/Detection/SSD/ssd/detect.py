"""Detect objects in images with an SSD300 checkpoint and draw the boxes into PNG files.

python -m ssd.detect --checkpoint results/model.pt --output out/ photo1.jpg photo2.jpg
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.coco import PALETTE, read_image

if TYPE_CHECKING:
    from ssd.boxes import Detections


def load_images(paths: list[str], image_size: int = 300):
    """PIL images and the normalised ``(N, 3, S, S)`` batch the model takes."""
    import torch
    from torchvision.transforms.v2 import functional as F

    from ssd.data import MEAN, STD

    pil, batch = [], []
    for p in paths:
        im = read_image(p)
        pil.append(im)
        t = F.resize(F.pil_to_tensor(im), [image_size, image_size], antialias=True)
        batch.append(F.normalize(F.to_dtype(t, torch.float32, scale=True), MEAN, STD))
    return pil, torch.stack(batch)


def draw(image, det: Detections, names: dict[int, str], threshold: float):
    """A copy of ``image`` with the detections above ``threshold`` drawn on it."""
    from PIL import ImageDraw

    out = image.copy()
    d = ImageDraw.Draw(out)
    w, h = out.size
    for box, score, label in zip(det.boxes.tolist(), det.scores.tolist(), det.labels.tolist(), strict=True):
        if score < threshold:
            continue
        colour = PALETTE[label % len(PALETTE)]
        x1, y1, x2, y2 = box[0] * w, box[1] * h, box[2] * w, box[3] * h
        d.rectangle([x1, y1, x2, y2], outline=colour, width=max(2, w // 200))
        d.text((x1 + 3, y1 + 2), f"{names.get(label, str(label))} {score:.2f}", fill=colour)
    return out


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m ssd.detect", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("images", nargs="+", help="image files (JPEG, PNG, ...)")
    p.add_argument("--checkpoint", required=True, help="model.pt or checkpoint.pt from ssd.train")
    p.add_argument("--output", default="detections", help="folder for <image name>.png")
    p.add_argument("--threshold", type=float, default=0.4, help="draw boxes scoring at least this")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where a GPU is visible)")
    a = parse_args(p, argv)
    import torch

    from ssd.boxes import Detections, default_boxes, postprocess
    from ssd.evaluate import load_model
    from ssd.model import build_inference_model

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, category_ids = load_model(a.checkpoint, a.device)
    state_names = torch.load(a.checkpoint, map_location="cpu", weights_only=False).get("category_names", {})
    names = {i + 1: state_names.get(cid, str(cid)) for i, cid in enumerate(category_ids)}
    pil, batch = load_images(a.images)
    model = build_inference_model(model)
    with torch.no_grad():
        loc, logits = model(batch.to(a.device))
    dets = postprocess(loc, logits, default_boxes().to(a.device))
    out_dir = Path(a.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, im, det in zip(a.images, pil, dets, strict=True):
        det = Detections(det.boxes.cpu(), det.scores.cpu(), det.labels.cpu())
        target = out_dir / (Path(path).stem + ".png")
        draw(im, det, names, a.threshold).save(target)
        kept = int((det.scores >= a.threshold).sum())
        print(f"{path}: {kept} objects >= {a.threshold} -> {target}", file=sys.stderr)
        for box, score, label in zip(
            det.boxes.tolist(), det.scores.tolist(), det.labels.tolist(), strict=True
        ):
            if score >= a.threshold:
                print(f"  {names.get(label, label)} {score:.3f} [{', '.join(f'{v:.3f}' for v in box)}]")


if __name__ == "__main__":
    main()
