"""COCO mAP@[.5:.95] of an SSD300 checkpoint with pycocotools, and asynchronous scoring for training.

python -m ssd.evaluate --checkpoint results/model.pt --data-dir /data/coco --split val2017
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

import torch
from zoo.cli import entry_point
from zoo.errors import one_line

from ssd.boxes import default_boxes, postprocess

STAT_NAMES = ("mAP", "AP50", "AP75", "AP_small", "AP_medium", "AP_large")


@torch.no_grad()
def detect_dataset(
    model,
    loader,
    category_ids,
    *,
    device,
    max_steps: int | None = None,
    progress=None,
):
    """Run ``model`` (the inference model of :func:`ssd.model.build_inference_model`, which carries
    its precision) over a loader; return COCO result dicts (bbox in original pixels, xywh).

    ``progress``: a ``zoo.log.MetricsLogger`` whose bar shows batches done/total and images/s.
    """
    model.eval()
    dboxes = default_boxes().to(device)
    results = []
    for step, batch in enumerate(loader):
        if max_steps is not None and step >= max_steps:
            break
        batch = batch.to(device)
        loc, logits = model(batch.images)
        for det, image_id, (h, w) in zip(
            postprocess(loc, logits, dboxes), batch.image_ids.tolist(), batch.sizes.tolist(), strict=True
        ):
            scale = torch.tensor([w, h, w, h], device=det.boxes.device, dtype=torch.float32)
            b = det.boxes * scale
            b[:, 2:] -= b[:, :2]
            for box, score, label in zip(b.tolist(), det.scores.tolist(), det.labels.tolist(), strict=True):
                results.append(
                    {
                        "image_id": int(image_id),
                        "category_id": int(category_ids[label - 1]),
                        "bbox": [round(v, 2) for v in box],
                        "score": round(float(score), 5),
                    }
                )
        if progress is not None:
            progress.progress(step + 1, len(batch.image_ids))
    return results


def coco_map(
    annotation_file: str, results: list[dict], image_ids: list[int] | None = None
) -> dict[str, float]:
    """pycocotools bbox evaluation; returns mAP@[.5:.95] as ``mAP`` and the other summary numbers."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise SystemExit("COCO evaluation needs pycocotools (pip install -r requirements.txt)") from None
    if not results:
        return dict.fromkeys(STAT_NAMES, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = json.loads(Path(annotation_file).read_text())
        gt.dataset.setdefault("info", {})  # loadRes copies it; COCO-format files made by hand often lack it
        gt.createIndex()
        dt = gt.loadRes([dict(r) for r in results])  # loadRes adds keys to the dicts it gets
        ev = COCOeval(gt, dt, iouType="bbox")
        if image_ids is not None:
            ev.params.imgIds = sorted(set(image_ids))
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {k: float(v) for k, v in zip(STAT_NAMES, ev.stats, strict=False)}


def load_model(checkpoint: str, device) -> tuple[torch.nn.Module, list[int]]:
    """Model and COCO category ids from a training checkpoint or a ``model.pt`` written by training."""
    from ssd.model import SSD300

    path = Path(checkpoint)
    if not path.is_file():
        raise SystemExit(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        raise SystemExit(f"checkpoint {path} cannot be read: {one_line(e)}") from None
    if not isinstance(state, dict) or "model" not in state or "category_ids" not in state:
        raise SystemExit(f"checkpoint {path} is not an SSD checkpoint (no 'model'/'category_ids' entries)")
    model = SSD300(num_classes=len(state["category_ids"]) + 1)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise SystemExit(f"checkpoint {path} does not fit SSD300: {str(e).splitlines()[1].strip()}") from None
    return model.to(device), list(state["category_ids"])


@entry_point
def main(argv=None) -> None:
    from zoo.cli import AMP_CHOICES, parse_args
    from zoo.log import MetricsLogger

    from ssd.data import build_loader
    from ssd.model import build_inference_model

    p = argparse.ArgumentParser(
        prog="python -m ssd.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint.pt or model.pt from ssd.train")
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="COCO root with <split>/ and annotations/instances_<split>.json ($DATA_DIR)",
    )
    p.add_argument("--split", default="val2017")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument(
        "--amp",
        choices=AMP_CHOICES,
        default="fp32",
        help="precision of the inference model (weights and compute; BatchNorm folded)",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--results-json", help="also write the detections (COCO result format) here")
    a = parse_args(p, argv)
    if not a.data_dir:
        raise SystemExit("error: give --data-dir (or set DATA_DIR): the COCO root to score on")
    data = Path(a.data_dir)
    ann = data / "annotations" / f"instances_{a.split}.json"
    model, category_ids = load_model(a.checkpoint, a.device)
    loader = build_loader(data / a.split, ann, train=False, batch_size=a.batch_size, workers=a.workers)
    if len(loader.dataset.category_ids) != len(category_ids):
        raise SystemExit(
            f"checkpoint has {len(category_ids)} classes, {ann} has {len(loader.dataset.category_ids)}"
        )
    t = time.time()
    with MetricsLogger(total_steps=len(loader), desc=f"detect {a.split}") as progress:
        results = detect_dataset(
            build_inference_model(model, a.amp), loader, category_ids, device=a.device, progress=progress
        )
    seconds = time.time() - t
    if a.results_json:
        Path(a.results_json).write_text(json.dumps(results))
    stats = coco_map(str(ann), results)
    print(
        f"{len(loader.dataset)} images in {seconds:.1f}s ({len(loader.dataset) / seconds:.1f} img/s), "
        f"{len(results)} detections",
        file=sys.stderr,
    )
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
