"""RetinaNet's detections from the ONNX model's candidates: class-wise NMS in numpy, for Triton.

The python-backend model ``retinanet_python`` is the zoo's shared ONNX model file; it runs the ONNX
model (decoding inside the graph) and hands each request's ``boxes (N, L*k, 4)``, ``scores (N, L*k)``
(0: not a candidate) and ``labels (N, L*k)`` to :func:`postprocess`. Copied beside it as
``postprocess.py``; imports only numpy. Settings (config.pbtxt parameters): ``nms_threshold``,
``max_detections``. The result equals :func:`retinanet.boxes.select`.
"""

import numpy as np


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy NMS (torchvision's rule: drop a box whose IoU with a kept one exceeds ``threshold``)."""
    order = np.argsort(-scores, kind="stable")
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order.size:
        best = order[0]
        keep.append(best)
        rest = order[1:]
        top_left = np.maximum(boxes[best, :2], boxes[rest, :2])
        bottom_right = np.minimum(boxes[best, 2:], boxes[rest, 2:])
        inter = np.clip(bottom_right - top_left, 0, None).prod(axis=1)
        iou = inter / np.maximum(area[best] + area[rest] - inter, 1e-12)
        order = rest[iou <= threshold]
    return np.array(keep, dtype=np.int64)


def detect(boxes, scores, labels, *, nms_threshold: float, max_detections: int):
    """One image's (boxes, scores, labels), best first, from its candidates."""
    chosen = np.nonzero(scores > 0)[0]
    boxes, scores, labels = boxes[chosen], scores[chosen], labels[chosen]
    kept = [
        np.nonzero(labels == label)[0][nms(boxes[labels == label], scores[labels == label], nms_threshold)]
        for label in np.unique(labels)
    ]
    keep = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    keep = keep[np.argsort(-scores[keep], kind="stable")][:max_detections]
    return boxes[keep], scores[keep], labels[keep]


def postprocess(outputs: dict, parameters: dict) -> dict:
    """A request's detections, padded to ``max_detections`` (label -1 and score 0 are padding)."""
    nms_threshold = float(parameters["nms_threshold"])
    limit = int(parameters["max_detections"])
    count = len(outputs["boxes"])
    result = {
        "detection_boxes": np.zeros((count, limit, 4), np.float32),
        "detection_scores": np.zeros((count, limit), np.float32),
        "detection_labels": np.full((count, limit), -1, np.int64),
        "num_detections": np.zeros((count, 1), np.int64),
    }
    for i in range(count):
        boxes, scores, labels = detect(
            outputs["boxes"][i], outputs["scores"][i], outputs["labels"][i],
            nms_threshold=nms_threshold, max_detections=limit,
        )  # fmt: skip
        found = len(scores)
        result["detection_boxes"][i, :found] = boxes
        result["detection_scores"][i, :found] = scores
        result["detection_labels"][i, :found] = labels
        result["num_detections"][i, 0] = found
    return result
