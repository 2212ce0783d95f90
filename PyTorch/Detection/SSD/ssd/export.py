"""Export SSD300's inference model to ONNX and TorchScript and write a Triton model repository.

    python -m ssd.export --checkpoint results/model.pt --repository triton_repo [--amp fp16]

Every file holds the model of :func:`ssd.model.build_inference_model` (BatchNorm folded into the
convolutions, weights and compute in ``--amp``'s precision, fp32 by default; FP32 in and out), the
one evaluation and the benchmark run; each config.pbtxt records it as its ``precision`` parameter.
The repository holds four models:
  ssd300_onnx          onnxruntime_onnx: raw head outputs ``loc (N, 8732, 4)``, ``logits (N, 8732, C)``
  ssd300_torchscript   pytorch_libtorch: the same outputs from a traced TorchScript file, tensors named
                       by position (``INPUT__0`` the images, ``OUTPUT__0`` loc, ``OUTPUT__1`` logits)
  ssd300_decoded_onnx  onnxruntime_onnx: post-processing inside, ``boxes (N, 8732, 4)`` xyxy in [0, 1]
                       and ``scores (N, 8732, C)`` (softmax); NMS is left to the client
  ssd300_python        python backend: the zoo's shared ONNX model file (zoo.triton.repository.ONNX_PYTHON_MODEL)
                       over the decoded ONNX model, with per-class NMS (ssd/triton_postprocess.py as its
                       postprocess file), ``detection_boxes (N, K, 4)``, ``detection_scores``,
                       ``detection_labels`` (0 = padding) and ``num_detections``; the same boxes as
                       :func:`ssd.boxes.postprocess`
Input everywhere: ``images (N, 3, 300, 300)`` FP32, normalised with the ImageNet mean/std.
onnxruntime has no bfloat16 convolutions: ``--amp bf16`` writes ``ssd300_torchscript`` only.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.coco import add_repository_args, write_repository_models
from zoo.errors import UserError

if TYPE_CHECKING:
    from ssd.model import SSD300, InferenceSSD

MAX_DETECTIONS = 200
POSTPROCESS = Path(__file__).with_name("triton_postprocess.py")
# The libtorch backend names tensors by position.
LIBTORCH_INPUT, LIBTORCH_OUTPUTS = "INPUT__0", ("OUTPUT__0", "OUTPUT__1")


def inference_model(model: SSD300 | InferenceSSD, amp: str = "fp32") -> InferenceSSD:
    """The model every exported file holds: ``model``'s inference model in ``amp``'s precision on
    the CPU (an :class:`InferenceSSD` is taken as it is)."""
    from ssd.model import InferenceSSD, build_inference_model

    if isinstance(model, InferenceSSD):
        return model.eval()
    return build_inference_model(model.cpu(), amp)


def export_onnx(
    model: SSD300 | InferenceSSD, path: str | Path, *, postprocess: bool, image_size: int = 300
) -> Path:
    """ONNX of the inference model (``model`` itself if it is one, else its fp32 inference model)
    with a dynamic batch axis; outputs ``loc, logits`` or, with ``postprocess``, ``boxes, scores``."""
    import torch

    from ssd.boxes import default_boxes
    from ssd.model import SSDWithPostprocess

    model = inference_model(model)
    if model.dtype == torch.bfloat16:
        raise UserError("onnxruntime runs no bfloat16 convolutions: export ONNX in fp32 or fp16")
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
    import torch

    model = inference_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        # One image, no second run to check the trace (the tests compare the traced model with the inference
        # model on two other images): a CPU export in fp16 or bf16 (no half-precision kernels) took minutes.
        traced = torch.jit.trace(model, torch.zeros(1, 3, image_size, image_size), check_trace=False)
    tmp = path.with_suffix(".pt.tmp")
    traced.save(str(tmp))
    tmp.replace(path)
    return path


def write_repository(
    model: SSD300,
    repository: str | Path,
    *,
    amp: str = "fp32",
    max_batch_size: int = 16,
    instance_kind: str = "KIND_GPU",
    score_threshold: float = 0.05,
    nms_threshold: float = 0.5,
) -> Path:
    """Write the four models of the module docstring, each holding ``model``'s inference model in
    ``amp``'s precision, into ``repository`` (bf16: the TorchScript model only); returns its path."""
    from zoo.triton.repository import ONNX_PYTHON_MODEL, TensorSpec, model_config, write_model

    repo = Path(repository)
    model = inference_model(model, amp)
    c = model.num_classes
    images = [TensorSpec("images", "FP32", [3, 300, 300])]
    batching = {
        "preferred_batch_size": [max(1, max_batch_size // 2), max_batch_size],
        "max_queue_delay_microseconds": 100,
    }
    precision = {"precision": amp}
    with tempfile.TemporaryDirectory() as tmp:
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
            parameters=precision,
        )
        write_model(repo, cfg, {"model.pt": export_torchscript(model, Path(tmp) / "model.pt")})
        if amp == "bf16":
            return repo
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
            parameters=precision,
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
            parameters=precision,
        )
        write_model(repo, cfg, {"model.onnx": decoded})
        settings = {
            "postprocess": "postprocess.py",
            "score_threshold": score_threshold,
            "nms_threshold": nms_threshold,
            "max_detections": MAX_DETECTIONS,
            "candidates_per_class": 200,
            **precision,
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


def triton_models(amp: str) -> list[str]:
    """The models write_repository writes in ``amp``'s precision."""
    if amp == "bf16":
        return ["ssd300_torchscript"]
    return ["ssd300_torchscript", "ssd300_onnx", "ssd300_decoded_onnx", "ssd300_python"]


@entry_point
def main(argv=None) -> None:
    from zoo.cli import AMP_CHOICES, parse_args

    p = argparse.ArgumentParser(
        prog="python -m ssd.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="model.pt or checkpoint.pt from ssd.train")
    src.add_argument(
        "--random-init", type=int, metavar="NUM_CLASSES", help="export an untrained model (smoke)"
    )
    p.add_argument(
        "--amp",
        choices=AMP_CHOICES,
        default="fp32",
        help="precision of the exported weights and compute (BatchNorm folded; FP32 in and out); "
        "bf16: the TorchScript model only",
    )
    p.add_argument("--max-batch-size", type=int, default=16)
    add_repository_args(p, onnx_models="the ONNX models")
    a = parse_args(p, argv)
    from zoo.triton.repository import refuse_existing_models

    models = triton_models(a.amp)
    refuse_existing_models(a.repository, models, force=a.force)

    import torch  # once the repository has passed its check

    from ssd.evaluate import load_model
    from ssd.model import SSD300

    if a.checkpoint:
        model, _ = load_model(a.checkpoint, "cpu")
    else:
        torch.manual_seed(0)
        model = SSD300(num_classes=a.random_init)
    settings = {"amp": a.amp, "max_batch_size": a.max_batch_size, "instance_kind": a.instance_kind}
    write_repository_models(
        a.repository,
        models,
        lambda repo: write_repository(model, repo, **settings),
        force=a.force,
        note=f" ({a.amp})",
    )


if __name__ == "__main__":
    main()
