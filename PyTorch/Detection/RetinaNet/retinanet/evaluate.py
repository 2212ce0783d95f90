"""COCO-style mAP@[.5:.95] of a RetinaNet checkpoint with pycocotools (OpenImages-MLPerf is scored the
same way, as the MLPerf reference does).

    python -m retinanet.evaluate --checkpoint results/model.pt --data-dir /data/openimages --split validation
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.coco import add_evaluate_args, coco_scores, detect_and_score, evaluation_split, write_json
from zoo.errors import UserError, one_line
from zoo.torch import amp_dtype

if TYPE_CHECKING:
    from retinanet.model import RetinaNet


def detect_dataset(model, loader, category_ids, *, amp: str = "fp32", device, progress=None) -> list[dict]:
    """``model``'s detections on every image of ``loader`` as COCO result dicts (bbox xywh in the
    original image's pixels). ``progress``: a zoo.log.MetricsLogger showing batches done and images/s."""
    import torch

    from retinanet.model import detect

    with torch.no_grad():
        model.eval()
        dtype = amp_dtype(amp)
        results = []
        for i, batch in enumerate(loader):
            batch = batch.to(device)
            size = batch.images.shape[-1]
            found = detect(model, batch.images, amp_dtype=dtype)
            for (boxes, scores, labels), image_id, (h, w) in zip(
                found, batch.image_ids.tolist(), batch.sizes.tolist(), strict=True
            ):
                scale = torch.tensor([w / size, h / size, w / size, h / size], device=boxes.device)
                boxes = boxes * scale
                boxes[:, 2:] -= boxes[:, :2]
                for box, score, label in zip(boxes.tolist(), scores.tolist(), labels.tolist(), strict=True):
                    results.append({
                        "image_id": int(image_id), "category_id": int(category_ids[label]),
                        "bbox": [round(v, 2) for v in box], "score": round(float(score), 5),
                    })  # fmt: skip
            if progress is not None:
                progress.progress(i + 1, len(batch.image_ids))
        return results


def coco_map(annotation_file: str, results: list[dict], image_ids=None) -> dict[str, float]:
    """Box AP of ``results``: zoo.coco.coco_scores (``map``, AP@[.5:.95] as a fraction, and the others)."""
    return coco_scores(annotation_file, results, image_ids, iou_types=("bbox",))


def torchvision_checkpoint(weights: dict) -> dict:
    """A torchvision ``retinanet_resnet50_fpn`` (v1) or ``_v2`` state dict as this model's checkpoint:
    its labels are COCO's category ids (0 unused), the image size MLPerf's 800."""
    version = 2 if "head.classification_head.conv.0.1.weight" in weights else 1
    classes = weights["head.classification_head.cls_logits.weight"].shape[0] // 9
    settings = {"backbone": "resnet50", "version": version}
    return {"model": weights, "category_ids": list(range(classes)), "settings": settings, "image_size": 800}


def load_model(checkpoint, device) -> tuple[RetinaNet, dict]:
    """The model and what else a ``model.pt`` or ``checkpoint.pt`` of retinanet.train holds
    (``category_ids``, ``category_names``, ``image_size``), or a torchvision RetinaNet's weights
    (:func:`torchvision_checkpoint`); a UserError naming a file that is not one."""
    import torch

    from retinanet.model import RetinaNet

    path = Path(checkpoint)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        raise UserError(f"checkpoint {path} cannot be read: {one_line(e)}") from None
    if isinstance(state, dict) and "head.classification_head.cls_logits.weight" in state:
        state = torchvision_checkpoint(state)
    if not isinstance(state, dict) or not {"model", "category_ids", "settings"} <= set(state):
        raise UserError(
            f"checkpoint {path} is not a RetinaNet checkpoint (no 'model'/'category_ids'/'settings')"
        )
    model = RetinaNet(len(state["category_ids"]), state["settings"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise UserError(
            f"checkpoint {path} does not fit RetinaNet: {str(e).splitlines()[1].strip()}"
        ) from None
    info = {
        "category_ids": list(state["category_ids"]),
        "category_names": state.get("category_names", {}),
        "image_size": state.get("image_size", 800),
    }
    return model.to(device), info


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m retinanet.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_evaluate_args(
        p, train_module="retinanet.train", batch_size=32, amp_help="autocast precision of the forward"
    )
    p.add_argument("--results-json", help="also write the detections (COCO result format) here")
    a = parse_args(p, argv)
    image_dir, annotation_file = evaluation_split(a)  # the flags and the folders, before torch

    from retinanet.data import build_loader

    model, info = load_model(a.checkpoint, a.device)
    loader = build_loader(
        image_dir, annotation_file, train=False, batch_size=a.batch_size, image_size=info["image_size"],
        workers=a.workers,
    )  # fmt: skip
    if loader.dataset.num_classes != len(info["category_ids"]):
        raise UserError(
            f"checkpoint has {len(info['category_ids'])} classes, {annotation_file} has {loader.dataset.num_classes}"
        )
    results, _ = detect_and_score(
        lambda progress: detect_dataset(
            model, loader, info["category_ids"], amp=a.amp, device=a.device, progress=progress
        ),
        loader, annotation_file, coco_map, a.split,
    )  # fmt: skip
    if a.results_json:
        write_json(a.results_json, results)


if __name__ == "__main__":
    main()
