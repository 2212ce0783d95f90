"""Export SSD300's inference model to ONNX and TorchScript and write a Triton model repository.

    python -m ssd.export --checkpoint results/model.pt --repository triton_repo [--precision fp16]

Every file holds the model of :func:`ssd.model.build_inference_model` (BatchNorm folded into the
convolutions, weights and compute in ``--precision``, FP32 in and out), the one evaluation and the
benchmark run. The repository holds four models:
  ssd300_onnx          onnxruntime_onnx: raw head outputs ``loc (N, 8732, 4)``, ``logits (N, 8732, C)``
  ssd300_torchscript   pytorch_libtorch: the same outputs from a traced TorchScript file, tensors named
                       by position (``INPUT__0`` the images, ``OUTPUT__0`` loc, ``OUTPUT__1`` logits)
  ssd300_decoded_onnx  onnxruntime_onnx: post-processing inside, ``boxes (N, 8732, 4)`` xyxy in [0, 1]
                       and ``scores (N, 8732, C)`` (softmax); NMS is left to the client
  ssd300_python        python backend: the zoo's shared ONNX model file (zoo.triton.ONNX_PYTHON_MODEL)
                       over the decoded ONNX model, with per-class NMS (ssd/triton_postprocess.py as its
                       postprocess file), ``detection_boxes (N, K, 4)``, ``detection_scores``,
                       ``detection_labels`` (0 = padding) and ``num_detections``; the same boxes as
                       :func:`ssd.boxes.postprocess`
Input everywhere: ``images (N, 3, 300, 300)`` FP32, normalised with the ImageNet mean/std.
``--precision bf16`` is refused: onnxruntime has no bfloat16 convolutions.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from ssd.boxes import default_boxes
from ssd.model import SSD300, InferenceSSD, SSDWithPostprocess, build_inference_model

MAX_DETECTIONS = 200
POSTPROCESS = Path(__file__).with_name("triton_postprocess.py")
EXPORT_PRECISIONS = ("fp32", "fp16")
# The libtorch backend names tensors by position.
LIBTORCH_INPUT, LIBTORCH_OUTPUTS = "INPUT__0", ("OUTPUT__0", "OUTPUT__1")


def inference_model(model: SSD300 | InferenceSSD, precision: str = "fp32") -> InferenceSSD:
    """The model every exported file holds: ``model``'s inference model on the CPU (an
    :class:`InferenceSSD` is taken as it is)."""
    if isinstance(model, InferenceSSD):
        return model.eval()
    check_precision(precision)
    return build_inference_model(model.cpu(), precision)


def check_precision(precision: str) -> None:
    """A one-line SystemExit for a precision the exported files cannot carry."""
    if precision not in EXPORT_PRECISIONS:
        raise SystemExit(
            f"error: --precision {precision}: onnxruntime runs no bfloat16 convolutions; use fp16 or fp32"
        )


def export_onnx(
    model: SSD300 | InferenceSSD, path: str | Path, *, postprocess: bool, image_size: int = 300
) -> Path:
    """ONNX of the inference model (``model`` itself if it is one, else its fp32 inference model)
    with a dynamic batch axis; outputs ``loc, logits`` or, with ``postprocess``, ``boxes, scores``."""
    model = inference_model(model)
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


def export_torchscript(model: SSD300 | InferenceSSD, path: str | Path, image_size: int = 300) -> Path:
    """Traced TorchScript of the inference model (``model`` itself if it is one, else its fp32 one):
    ``images (N, 3, S, S)`` FP32 -> ``loc``, ``logits`` FP32."""
    model = inference_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.zeros(2, 3, image_size, image_size))
    tmp = path.with_suffix(".pt.tmp")
    traced.save(str(tmp))
    tmp.replace(path)
    return path


def write_repository(
    model: SSD300,
    repository: str | Path,
    *,
    precision: str = "fp32",
    max_batch_size: int = 16,
    instance_kind: str = "KIND_GPU",
    score_threshold: float = 0.05,
    nms_threshold: float = 0.5,
) -> Path:
    """Write the four models of the module docstring, each holding ``model``'s inference model in
    ``precision`` (fp32 or fp16), into ``repository``; returns its path."""
    from zoo.triton import ONNX_PYTHON_MODEL, TensorSpec, model_config, write_model

    repo = Path(repository)
    model = inference_model(model, precision)
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
            "ssd300_torchscript",
            platform="pytorch_libtorch",
            max_batch_size=max_batch_size,
            inputs=[TensorSpec(LIBTORCH_INPUT, "FP32", [3, 300, 300])],
            outputs=[
                TensorSpec(LIBTORCH_OUTPUTS[0], "FP32", [8732, 4]),
                TensorSpec(LIBTORCH_OUTPUTS[1], "FP32", [8732, c]),
            ],
            instance_kind=instance_kind,
            dynamic_batching=batching,
        )
        write_model(repo, cfg, {"model.pt": export_torchscript(model, Path(tmp) / "model.pt")})
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
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16", "bf16"),
        default="fp32",
        help="weights and compute of every exported file (inputs and outputs stay FP32); bf16 is refused",
    )
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument(
        "--instance-kind",
        choices=("KIND_GPU", "KIND_CPU"),
        default="KIND_GPU",
        help="instances of the ONNX models (the python model always runs on CPU)",
    )
    a = p.parse_args(argv)
    check_precision(a.precision)
    if a.checkpoint:
        model, _ = load_model(a.checkpoint, "cpu")
    else:
        torch.manual_seed(0)
        model = SSD300(num_classes=a.random_init)
    repo = Path(a.repository)
    if repo.exists():
        shutil.rmtree(repo)
    write_repository(
        model, repo, precision=a.precision, max_batch_size=a.max_batch_size, instance_kind=a.instance_kind
    )
    print(f"wrote {', '.join(sorted(p.name for p in repo.iterdir()))} ({a.precision}) to {repo}")


if __name__ == "__main__":
    main()
