"""Export SSD300 to ONNX and write a Triton model repository.

    python -m ssd.export --checkpoint results/model.pt --repository triton_repo

The repository holds three models:
  ssd300_onnx          onnxruntime_onnx: raw head outputs ``loc (N, 8732, 4)``, ``logits (N, 8732, C)``
  ssd300_decoded_onnx  onnxruntime_onnx: post-processing inside, ``boxes (N, 8732, 4)`` xyxy in [0, 1]
                       and ``scores (N, 8732, C)`` (softmax); NMS is left to the client
  ssd300_python        python backend: the zoo's shared ONNX model file (zoo.triton.ONNX_PYTHON_MODEL)
                       over the decoded ONNX model, with per-class NMS (ssd/triton_postprocess.py as its
                       postprocess file), ``detection_boxes (N, K, 4)``, ``detection_scores``,
                       ``detection_labels`` (0 = padding) and ``num_detections``; the same boxes as
                       :func:`ssd.boxes.postprocess`
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
POSTPROCESS = Path(__file__).with_name("triton_postprocess.py")


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
    from zoo.triton import ONNX_PYTHON_MODEL, TensorSpec, model_config, write_model

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
            "postprocess": "postprocess.py",
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
            parameters=settings,
        )
        files = {"model.py": ONNX_PYTHON_MODEL, "model.onnx": decoded, "postprocess.py": POSTPROCESS}
        write_model(repo, cfg, files)
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
