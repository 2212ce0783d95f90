"""Detect and segment objects in images with a Mask R-CNN checkpoint; draw boxes, masks and labels into PNGs.

python -m maskrcnn.detect --checkpoint results/model.pt --output out/ photo1.jpg photo2.jpg
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from zoo.cli import entry_point
from zoo.coco import PALETTE, read_image

MASK_ALPHA = 0.45


def load_image(path):
    """(PIL image, float (3, H, W) tensor in [0, 1]); a UserError if it cannot be read."""
    import torch
    from torchvision.transforms.v2 import functional as F

    im = read_image(path)
    return im, F.to_dtype(F.pil_to_tensor(im), torch.float32, scale=True)


def count_line(scores, threshold: float) -> str:
    """How many detections reach ``threshold``; when none does, the best score, so that a short run's
    low scores read as such and not as an empty image."""
    kept = int((scores >= threshold).sum())
    if kept:
        return f"{kept} objects >= {threshold}"
    if len(scores) == 0:
        return f"0 objects >= {threshold} (no detection at any score)"
    return f"0 objects >= {threshold} (best score {float(scores.max()):.3f} of {len(scores)} detections: lower --threshold)"


def draw(image, output: dict, names: dict, threshold: float, mask_threshold: float = 0.5):
    """A copy of ``image`` with each detection scoring >= ``threshold``: its mask tinted, box, label."""
    from PIL import Image, ImageDraw

    pixels = np.asarray(image, dtype=np.float32).copy()
    keep = [i for i, s in enumerate(output["scores"].tolist()) if s >= threshold]
    for i in keep:
        colour = np.array(PALETTE[int(output["labels"][i]) % len(PALETTE)], np.float32)
        mask = (output["masks"][i, 0] >= mask_threshold).cpu().numpy()
        pixels[mask] = (1 - MASK_ALPHA) * pixels[mask] + MASK_ALPHA * colour
    out = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    pen = ImageDraw.Draw(out)
    width = max(2, out.size[0] // 300)
    for i in keep:
        label = int(output["labels"][i])
        colour = PALETTE[label % len(PALETTE)]
        x1, y1, x2, y2 = output["boxes"][i].tolist()
        pen.rectangle([x1, y1, x2, y2], outline=colour, width=width)
        pen.text(
            (x1 + 3, y1 + 2), f"{names.get(label, str(label))} {float(output['scores'][i]):.2f}", fill=colour
        )
    return out


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.detect",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("images", nargs="+", help="image files (JPEG, PNG, ...)")
    p.add_argument("--checkpoint", required=True, help="model.pt or checkpoint.pt from maskrcnn.train")
    p.add_argument("--output", default="detections", help="folder for <image name>.png")
    p.add_argument("--threshold", type=float, default=0.5, help="draw detections scoring at least this")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where a GPU is visible)")
    a = parse_args(p, argv)

    import torch

    from maskrcnn.evaluate import load_model

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, state = load_model(a.checkpoint, a.device)
    names = state.get("category_names", {})
    out_dir = Path(a.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in a.images:
        im, image = load_image(path)
        with torch.no_grad():
            output = {k: v.cpu() for k, v in model([image.to(a.device)])[0].items()}
        target = out_dir / (Path(path).stem + ".png")
        draw(im, output, names, a.threshold).save(target)
        keep = output["scores"] >= a.threshold
        print(f"{path}: {count_line(output['scores'], a.threshold)} -> {target}", file=sys.stderr)
        for box, score, label in zip(
            output["boxes"][keep].tolist(),
            output["scores"][keep].tolist(),
            output["labels"][keep].tolist(),
            strict=True,
        ):
            print(f"  {names.get(label, label)} {score:.3f} [{', '.join(f'{v:.1f}' for v in box)}]")


if __name__ == "__main__":
    main()
