"""COCO mAP@[.5:.95] of an SSD300 checkpoint with pycocotools, and asynchronous scoring for training.

python -m ssd.evaluate --checkpoint results/model.pt --data-dir /data/coco --split val2017
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.coco import add_evaluate_args, coco_scores, detect_and_score, evaluation_split, write_json
from zoo.errors import UserError, one_line

if TYPE_CHECKING:
    import torch


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
    import torch

    from ssd.boxes import default_boxes, postprocess

    with torch.no_grad():
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
                for box, score, label in zip(
                    b.tolist(), det.scores.tolist(), det.labels.tolist(), strict=True
                ):
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


def coco_map(annotation_file: str, results: list[dict], image_ids=None) -> dict[str, float]:
    """COCO box AP of ``results``: zoo.coco.coco_scores for bounding boxes (``map``, AP@[.5:.95] as a
    fraction, and the other summary numbers)."""
    return coco_scores(annotation_file, results, image_ids, iou_types=("bbox",))


def load_model(checkpoint: str, device) -> tuple[torch.nn.Module, list[int]]:
    """Model and COCO category ids from a training checkpoint or a ``model.pt`` written by training."""
    import torch

    from ssd.model import SSD300

    path = Path(checkpoint)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        raise UserError(f"checkpoint {path} cannot be read: {one_line(e)}") from None
    if not isinstance(state, dict) or "model" not in state or "category_ids" not in state:
        raise UserError(f"checkpoint {path} is not an SSD checkpoint (no 'model'/'category_ids' entries)")
    model = SSD300(num_classes=len(state["category_ids"]) + 1)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise UserError(f"checkpoint {path} does not fit SSD300: {str(e).splitlines()[1].strip()}") from None
    return model.to(device), list(state["category_ids"])


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m ssd.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    amp_help = "precision of the inference model (weights and compute; BatchNorm folded)"
    add_evaluate_args(p, train_module="ssd.train", batch_size=32, amp_help=amp_help)
    p.add_argument("--results-json", help="also write the detections (COCO result format) here")
    a = parse_args(p, argv)
    image_dir, annotation_file = evaluation_split(a)  # the flags and the folders, before torch

    from ssd.data import build_loader
    from ssd.model import build_inference_model

    model, category_ids = load_model(a.checkpoint, a.device)
    loader = build_loader(image_dir, annotation_file, train=False, batch_size=a.batch_size, workers=a.workers)
    if len(loader.dataset.category_ids) != len(category_ids):
        raise UserError(
            f"checkpoint has {len(category_ids)} classes, {annotation_file} has {len(loader.dataset.category_ids)}"
        )
    inference_model = build_inference_model(model, a.amp)
    results, _ = detect_and_score(
        lambda progress: detect_dataset(
            inference_model, loader, category_ids, device=a.device, progress=progress
        ),
        loader,
        annotation_file,
        coco_map,
        a.split,
    )
    if a.results_json:
        write_json(a.results_json, results)


if __name__ == "__main__":
    main()
