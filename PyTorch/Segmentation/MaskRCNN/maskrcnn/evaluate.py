"""COCO box and mask mAP@[.5:.95] of a Mask R-CNN checkpoint with pycocotools, and asynchronous
scoring for training.

    python -m maskrcnn.evaluate --checkpoint results/model.pt --data-dir /data/coco --split val2017
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from zoo.cli import entry_point
from zoo.errors import one_line
from zoo.torch import autocast

STAT_NAMES = ("mAP", "AP50", "AP75", "AP_small", "AP_medium", "AP_large")
MASK_THRESHOLD = 0.5


def to_coco_results(output: dict, image_id: int) -> list[dict]:
    """One image's model output as COCO result dicts: ``bbox`` (xywh) and ``segmentation`` (RLE)."""
    from pycocotools import mask as mask_utils

    boxes = output["boxes"].float().cpu()
    boxes[:, 2:] -= boxes[:, :2]
    masks = (output["masks"][:, 0] > MASK_THRESHOLD).cpu().numpy().astype(np.uint8)
    rles = mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0))) if len(masks) else []
    out = []
    for box, score, label, rle in zip(
        boxes.tolist(), output["scores"].float().tolist(), output["labels"].tolist(), rles, strict=True
    ):
        out.append(
            {
                "image_id": int(image_id),
                "category_id": int(label),
                "bbox": [round(v, 2) for v in box],
                "score": round(float(score), 5),
                "segmentation": {"size": rle["size"], "counts": rle["counts"].decode("ascii")},
            }
        )
    return out


@torch.no_grad()
def detect_dataset(model, loader, *, device, amp: str = "fp32", max_steps: int | None = None, progress=None):
    """Run the model over a loader; COCO result dicts with boxes and masks in original pixels.

    ``progress``: a ``zoo.log.MetricsLogger`` whose bar shows batches done/total and images/s.
    """
    model.eval()
    results = []
    for step, (images, targets) in enumerate(loader):
        if max_steps is not None and step >= max_steps:
            break
        with autocast(device, amp):
            outputs = model([im.to(device) for im in images])
        for output, target in zip(outputs, targets, strict=True):
            results += to_coco_results(output, target["image_id"])
        if progress is not None:
            progress.progress(step + 1, len(images))
    return results


def coco_map(annotation_file: str, results: list[dict], image_ids=None) -> dict[str, float]:
    """pycocotools bbox and segm evaluation: ``BBOX`` and ``SEGM`` (mAP@[.5:.95]), and per kind
    ``bbox_AP50``, ``segm_AP75``, ... (the other summary numbers)."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise SystemExit(
            "error: COCO evaluation needs pycocotools (pip install -r requirements.txt)"
        ) from None
    stats = {"BBOX": 0.0, "SEGM": 0.0}
    if not results:
        return stats
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = json.loads(Path(annotation_file).read_text())
        gt.dataset.setdefault("info", {})  # loadRes copies it; hand-made COCO files often lack it
        gt.createIndex()
        for kind in ("bbox", "segm"):
            dt = gt.loadRes([dict(r) for r in results])  # loadRes adds keys to the dicts it gets
            ev = COCOeval(gt, dt, iouType=kind)
            if image_ids is not None:
                ev.params.imgIds = sorted(set(image_ids))
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            stats[kind.upper()] = float(ev.stats[0])
            stats.update(
                {f"{kind}_{k}": float(v) for k, v in zip(STAT_NAMES[1:], ev.stats[1:], strict=False)}
            )
    return stats


def load_model(checkpoint: str, device) -> tuple[torch.nn.Module, dict]:
    """Model and its checkpoint entries (``recipe``, ``category_ids``, ``category_names``) from a file
    written by training (checkpoint.pt or model.pt)."""
    from maskrcnn.model import model_from_recipe

    path = Path(checkpoint)
    if not path.is_file():
        raise SystemExit(f"error: checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        raise SystemExit(f"error: checkpoint {path} cannot be read: {one_line(e)}") from None
    if not isinstance(state, dict) or not {"model", "recipe", "num_classes"} <= set(state):
        raise SystemExit(f"error: checkpoint {path} is not a Mask R-CNN checkpoint of maskrcnn.train")
    model = model_from_recipe(state["recipe"], state["num_classes"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise SystemExit(f"error: checkpoint {path} does not fit its recipe's model: {one_line(e)}") from None
    return model.to(device).eval(), state


@entry_point
def main(argv=None) -> None:
    from zoo.cli import AMP_CHOICES, parse_args
    from zoo.log import MetricsLogger

    from maskrcnn.data import build_loader

    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint.pt or model.pt from maskrcnn.train")
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="COCO root with <split>/ and annotations/instances_<split>.json ($DATA_DIR)",
    )
    p.add_argument("--split", default="val2017")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--amp", choices=AMP_CHOICES, default="fp32", help="mixed precision (fp32: no autocast)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--results-dir", help="write detections.json (COCO results) and scores.json here")
    a = parse_args(p, argv)
    if not a.data_dir:
        raise SystemExit("error: give --data-dir (or set DATA_DIR): the COCO root to score on")
    if a.batch_size < 1 or a.workers < 0:
        raise SystemExit(
            f"error: --batch-size must be a positive integer and --workers >= 0, not {a.batch_size}, {a.workers}"
        )
    data = Path(a.data_dir)
    ann = data / "annotations" / f"instances_{a.split}.json"
    for path in (data, data / a.split, ann):
        if not path.exists():
            raise SystemExit(f"error: {path} does not exist (scripts/download_data.sh prepares COCO)")
    model, state = load_model(a.checkpoint, a.device)
    loader = build_loader(data / a.split, ann, train=False, batch_size=a.batch_size, workers=a.workers)
    if loader.dataset.num_classes > state["num_classes"]:
        raise SystemExit(
            f"error: {ann} has category ids up to {loader.dataset.num_classes - 1}, "
            f"the checkpoint knows {state['num_classes'] - 1}"
        )
    t = time.time()
    with MetricsLogger(total_steps=len(loader), desc=f"detect {a.split}") as progress:
        results = detect_dataset(model, loader, device=a.device, amp=a.amp, progress=progress)
    seconds = time.time() - t
    stats = coco_map(str(ann), results)
    if a.results_dir:
        out = Path(a.results_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "detections.json").write_text(json.dumps(results))
        (out / "scores.json").write_text(json.dumps(stats))
    print(
        f"{len(loader.dataset)} images in {seconds:.1f}s ({len(loader.dataset) / seconds:.1f} img/s), "
        f"{len(results)} detections",
        file=sys.stderr,
    )
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
