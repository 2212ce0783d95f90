"""COCO box and mask mAP@[.5:.95] of a Mask R-CNN checkpoint with pycocotools, and asynchronous
scoring for training.

    python -m maskrcnn.evaluate --checkpoint results/model.pt --data-dir /data/coco --split val2017
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from zoo.cli import entry_point
from zoo.coco import add_evaluate_args, coco_scores, detect_and_score, evaluation_split, write_json
from zoo.errors import UserError, one_line
from zoo.torch import autocast

if TYPE_CHECKING:
    import torch

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


def detect_dataset(model, loader, *, device, amp: str = "fp32", max_steps: int | None = None, progress=None):
    """Run the model over a loader; COCO result dicts with boxes and masks in original pixels.

    ``progress``: a ``zoo.log.MetricsLogger`` whose bar shows batches done/total and images/s.
    """
    import torch

    with torch.no_grad():
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
    """COCO box and mask AP of ``results``: zoo.coco.coco_scores for bounding boxes and segmentations
    (``map`` and ``mask_map``, AP@[.5:.95] as fractions, and the other summary numbers)."""
    return coco_scores(annotation_file, results, image_ids, iou_types=("bbox", "segm"))


def load_model(checkpoint: str, device) -> tuple[torch.nn.Module, dict]:
    """Model and its checkpoint entries (``recipe``, ``category_ids``, ``category_names``) from a file
    written by training (checkpoint.pt or model.pt)."""
    import torch

    from maskrcnn.model import model_from_recipe

    path = Path(checkpoint)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        raise UserError(f"checkpoint {path} cannot be read: {one_line(e)}") from None
    if not isinstance(state, dict) or not {"model", "recipe", "num_classes"} <= set(state):
        raise UserError(f"checkpoint {path} is not a Mask R-CNN checkpoint of maskrcnn.train")
    model = model_from_recipe(state["recipe"], state["num_classes"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise UserError(f"checkpoint {path} does not fit its recipe's model: {one_line(e)}") from None
    return model.to(device).eval(), state


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_evaluate_args(
        p, train_module="maskrcnn.train", batch_size=8, amp_help="mixed precision (fp32: no autocast)"
    )
    p.add_argument("--results-dir", help="write detections.json (COCO results) and scores.json here")
    a = parse_args(p, argv)
    image_dir, annotation_file = evaluation_split(a)  # the flags and the folders, before torch

    from maskrcnn.data import build_loader

    model, state = load_model(a.checkpoint, a.device)
    loader = build_loader(image_dir, annotation_file, train=False, batch_size=a.batch_size, workers=a.workers)
    if loader.dataset.num_classes > state["num_classes"]:
        raise UserError(
            f"{annotation_file} has category ids up to {loader.dataset.num_classes - 1}, "
            f"the checkpoint knows {state['num_classes'] - 1}"
        )
    results, scores = detect_and_score(
        lambda progress: detect_dataset(model, loader, device=a.device, amp=a.amp, progress=progress),
        loader,
        annotation_file,
        coco_map,
        a.split,
    )
    if a.results_dir:
        write_json(Path(a.results_dir) / "detections.json", results)
        write_json(Path(a.results_dir) / "scores.json", scores)


if __name__ == "__main__":
    main()
