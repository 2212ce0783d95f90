"""SSD300's detections from the decoded ONNX model's outputs: per-class NMS in numpy, for Triton.

The python-backend model ``ssd300_python`` is the zoo's shared ONNX model file; it runs the decoded
ONNX model and hands each request's ``boxes (N, 8732, 4)`` and ``scores (N, 8732, C)`` to
:func:`postprocess`. This file is copied beside it as ``postprocess.py`` and imports only numpy.
Its settings are config.pbtxt parameters: ``score_threshold``, ``nms_threshold``,
``max_detections``, ``candidates_per_class``. The result equals :func:`ssd.boxes.postprocess`.
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


def detect(boxes, scores, *, score_threshold, nms_threshold, max_detections, candidates_per_class):
    """One image's (boxes, scores, labels), best first: ``boxes (8732, 4)``, ``scores (8732, C)``."""
    foreground = scores[:, 1:]
    k = min(candidates_per_class, foreground.shape[0])
    index = np.argsort(-foreground, axis=0, kind="stable")[:k]  # (k, C-1)
    top = np.take_along_axis(foreground, index, axis=0)
    classes = np.broadcast_to(np.arange(1, scores.shape[1]), index.shape)
    index, top, classes = index.reshape(-1), top.reshape(-1), classes.reshape(-1)
    confident = top > score_threshold
    index, top, classes = index[confident], top[confident], classes[confident]
    candidates = boxes[index]
    kept = []
    for label in np.unique(classes):
        chosen = np.nonzero(classes == label)[0]
        kept.append(chosen[nms(candidates[chosen], top[chosen], nms_threshold)])
    keep = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    keep = keep[np.argsort(-top[keep], kind="stable")][:max_detections]
    return candidates[keep], top[keep], classes[keep]


def postprocess(outputs: dict, parameters: dict) -> dict:
    """A request's detections, padded to ``max_detections`` (label 0 and score 0 are padding)."""
    settings = {
        "score_threshold": float(parameters["score_threshold"]),
        "nms_threshold": float(parameters["nms_threshold"]),
        "max_detections": int(parameters["max_detections"]),
        "candidates_per_class": int(parameters["candidates_per_class"]),
    }
    boxes, scores = outputs["boxes"], outputs["scores"]
    count, limit = len(boxes), settings["max_detections"]
    result = {
        "detection_boxes": np.zeros((count, limit, 4), np.float32),
        "detection_scores": np.zeros((count, limit), np.float32),
        "detection_labels": np.zeros((count, limit), np.int64),
        "num_detections": np.zeros((count, 1), np.int64),
    }
    for i in range(count):
        found_boxes, found_scores, labels = detect(boxes[i], scores[i], **settings)
        found = len(found_scores)
        result["detection_boxes"][i, :found] = found_boxes
        result["detection_scores"][i, :found] = found_scores
        result["detection_labels"][i, :found] = labels
        result["num_detections"][i, 0] = found
    return result
