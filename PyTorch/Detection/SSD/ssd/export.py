"""Export SSD300 to ONNX and write a Triton model repository.

    python -m ssd.export --checkpoint results/model.pt --repository triton_repo

The repository holds three models:
  ssd300_onnx          onnxruntime_onnx: raw head outputs ``loc (N, 8732, 4)``, ``logits (N, 8732, C)``
  ssd300_decoded_onnx  onnxruntime_onnx: post-processing inside, ``boxes (N, 8732, 4)`` xyxy in [0, 1]
                       and ``scores (N, 8732, C)`` (softmax); NMS is left to the client
  ssd300_python        python backend: the decoded ONNX model in onnxruntime plus per-class NMS,
                       ``detection_boxes (N, K, 4)``, ``detection_scores``, ``detection_labels`` (0 = padding)
                       and ``num_detections``; the same boxes as :func:`ssd.boxes.postprocess`
Input everywhere: ``images (N, 3, 300, 300)`` FP32, normalised with the ImageNet mean/std.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from ssd.boxes import default_boxes
from ssd.model import SSD300, SSDWithPostprocess

MAX_DETECTIONS = 200

PYTHON_MODEL = '''"""SSD300 served by the python backend: decoded ONNX model in onnxruntime + per-class NMS in numpy."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

SETTINGS = json.loads("""{settings}""")


def nms(boxes, scores, threshold):
    """Greedy NMS (torchvision's rule: drop a box whose IoU with a kept one exceeds ``threshold``)."""
    order = np.argsort(-scores, kind="stable")
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        lt = np.maximum(boxes[i, :2], boxes[rest, :2])
        rb = np.minimum(boxes[i, 2:], boxes[rest, 2:])
        inter = np.clip(rb - lt, 0, None).prod(axis=1)
        iou = inter / np.maximum(area[i] + area[rest] - inter, 1e-12)
        order = rest[iou <= threshold]
    return np.array(keep, dtype=np.int64)


def detect(boxes, scores, s):
    fg = scores[:, 1:]
    k = min(s["candidates_per_class"], fg.shape[0])
    idx = np.argsort(-fg, axis=0, kind="stable")[:k]  # (k, C-1)
    top = np.take_along_axis(fg, idx, axis=0)
    classes = np.broadcast_to(np.arange(1, scores.shape[1]), idx.shape)
    idx, top, classes = idx.reshape(-1), top.reshape(-1), classes.reshape(-1)
    ok = top > s["score_threshold"]
    idx, top, classes = idx[ok], top[ok], classes[ok]
    cand = boxes[idx]
    keep_all = []
    for c in np.unique(classes):
        sel = np.nonzero(classes == c)[0]
        keep_all.append(sel[nms(cand[sel], top[sel], s["nms_threshold"])])
    keep = np.concatenate(keep_all) if keep_all else np.zeros(0, np.int64)
    keep = keep[np.argsort(-top[keep], kind="stable")][: s["max_detections"]]
    return cand[keep], top[keep], classes[keep]


class TritonPythonModel:
    def initialize(self, args):
        path = Path(__file__).parent / "model.onnx"
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        k = SETTINGS["max_detections"]
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "images").as_numpy().astype(np.float32)
            boxes, scores = self.session.run(["boxes", "scores"], {{"images": images}})
            n = images.shape[0]
            out_b = np.zeros((n, k, 4), np.float32)
            out_s = np.zeros((n, k), np.float32)
            out_l = np.zeros((n, k), np.int64)
            count = np.zeros((n, 1), np.int64)
            for i in range(n):
                b, sc, lab = detect(boxes[i], scores[i], SETTINGS)
                m = len(sc)
                out_b[i, :m], out_s[i, :m], out_l[i, :m], count[i, 0] = b, sc, lab, m
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("detection_boxes", out_b),
                pb_utils.Tensor("detection_scores", out_s),
                pb_utils.Tensor("detection_labels", out_l),
                pb_utils.Tensor("num_detections", count),
            ]))
        return responses
'''


def export_onnx(model: SSD300, path: str | Path, *, postprocess: bool, image_size: int = 300) -> Path:
    """ONNX with a dynamic batch axis; outputs ``loc, logits`` or, with ``postprocess``, ``boxes, scores``."""
    model = model.eval().float().cpu()
    # The exporter restores the wrapper's train/eval flag recursively afterwards: make it eval too.
    module = (SSDWithPostprocess(model, default_boxes()) if postprocess else model).eval()
    names = ["boxes", "scores"] if postprocess else ["loc", "logits"]
    dummy = torch.zeros(2, 3, image_size, image_size)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".onnx.tmp")
    torch.onnx.export(
        module,
        (dummy,),
        str(tmp),
        input_names=["images"],
        output_names=names,
        dynamic_axes={"images": {0: "batch"}, **{n: {0: "batch"} for n in names}},
        opset_version=17,
        dynamo=False,
    )
    tmp.replace(path)
    return path


def write_repository(
    model: SSD300,
    repository: str | Path,
    *,
    max_batch_size: int = 16,
    instance_kind: str = "KIND_GPU",
    score_threshold: float = 0.05,
    nms_threshold: float = 0.5,
) -> Path:
    """Write the three models of the module docstring into ``repository``; returns its path."""
    import json

    from zoo.triton import TensorSpec, model_config, write_model

    repo = Path(repository)
    c = model.num_classes
    images = [TensorSpec("images", "FP32", [3, 300, 300])]
    batching = {
        "preferred_batch_size": [max(1, max_batch_size // 2), max_batch_size],
        "max_queue_delay_microseconds": 100,
    }
    with tempfile.TemporaryDirectory() as tmp:
        raw = export_onnx(model, Path(tmp) / "raw.onnx", postprocess=False)
        decoded = export_onnx(model, Path(tmp) / "decoded.onnx", postprocess=True)
        cfg = model_config(
            "ssd300_onnx",
            platform="onnxruntime_onnx",
            max_batch_size=max_batch_size,
            inputs=images,
            outputs=[TensorSpec("loc", "FP32", [8732, 4]), TensorSpec("logits", "FP32", [8732, c])],
            instance_kind=instance_kind,
            dynamic_batching=batching,
        )
        write_model(repo, cfg, {"model.onnx": raw})
        cfg = model_config(
            "ssd300_decoded_onnx",
            platform="onnxruntime_onnx",
            max_batch_size=max_batch_size,
            inputs=images,
            outputs=[TensorSpec("boxes", "FP32", [8732, 4]), TensorSpec("scores", "FP32", [8732, c])],
            instance_kind=instance_kind,
            dynamic_batching=batching,
        )
        write_model(repo, cfg, {"model.onnx": decoded})
        settings = {
            "score_threshold": score_threshold,
            "nms_threshold": nms_threshold,
            "max_detections": MAX_DETECTIONS,
            "candidates_per_class": 200,
        }
        cfg = model_config(
            "ssd300_python",
            backend="python",
            max_batch_size=max_batch_size,
            inputs=images,
            outputs=[
                TensorSpec("detection_boxes", "FP32", [MAX_DETECTIONS, 4]),
                TensorSpec("detection_scores", "FP32", [MAX_DETECTIONS]),
                TensorSpec("detection_labels", "INT64", [MAX_DETECTIONS]),
                TensorSpec("num_detections", "INT64", [1]),
            ],
            instance_kind="KIND_CPU",
            dynamic_batching=batching,
        )
        code = PYTHON_MODEL.format(settings=json.dumps(settings))
        write_model(repo, cfg, {"model.py": code.encode(), "model.onnx": decoded})
    return repo


def main(argv=None) -> None:
    from ssd.evaluate import load_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="model.pt or checkpoint.pt from ssd.train")
    src.add_argument(
        "--random-init", type=int, metavar="NUM_CLASSES", help="export an untrained model (smoke)"
    )
    p.add_argument(
        "--repository", default="triton_repo", help="model repository folder (replaced if present)"
    )
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument(
        "--instance-kind",
        choices=("KIND_GPU", "KIND_CPU"),
        default="KIND_GPU",
        help="instances of the ONNX models (the python model always runs on CPU)",
    )
    a = p.parse_args(argv)
    if a.checkpoint:
        model, _ = load_model(a.checkpoint, "cpu")
    else:
        torch.manual_seed(0)
        model = SSD300(num_classes=a.random_init)
    repo = Path(a.repository)
    if repo.exists():
        shutil.rmtree(repo)
    write_repository(model, repo, max_batch_size=a.max_batch_size, instance_kind=a.instance_kind)
    print(f"wrote {', '.join(sorted(p.name for p in repo.iterdir()))} to {repo}")


if __name__ == "__main__":
    main()
