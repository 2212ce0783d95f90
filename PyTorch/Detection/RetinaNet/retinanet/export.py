"""Export RetinaNet's inference graph to ONNX and write a Triton model repository.

    python -m retinanet.export --checkpoint results/model.pt --repository triton_repo

The ONNX graph takes ``images (N, 3, H, W)`` FP32 normalised with the ImageNet mean and std, any
batch, height and width (anchors are made from the feature maps' shapes inside the graph), and holds
the heads and the decoding: each level's best ``candidates_per_level`` (anchor, class) pairs, decoded
and clipped (:class:`retinanet.model.RetinaNetCandidates`). NMS is beside the graph: class-wise NMS
is data-dependent, so it runs in numpy (``retinanet/triton_postprocess.py``) or in
:func:`retinanet.boxes.select` with torchvision. The repository holds two models:
  retinanet_onnx    onnxruntime_onnx: ``boxes (N, C, 4)`` xyxy in input pixels, ``scores (N, C)`` (0: no
                    candidate), ``labels (N, C)`` with C = 5 x candidates_per_level
  retinanet_python  python backend: the zoo's shared ONNX model file over the same ONNX file with
                    class-wise NMS after it: ``detection_boxes (N, D, 4)``, ``detection_scores``,
                    ``detection_labels`` (-1 = padding), ``num_detections``
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.coco import add_repository_args, write_repository_models

if TYPE_CHECKING:
    from retinanet.model import RetinaNet

POSTPROCESS = Path(__file__).with_name("triton_postprocess.py")
OUTPUTS = ("boxes", "scores", "labels")
TRITON_MODELS = ("retinanet_onnx", "retinanet_python")  # what write_repository writes


def export_onnx(model: RetinaNet, path, *, image_size: int = 128) -> Path:
    """ONNX of :class:`RetinaNetCandidates` over ``model`` (fp32, on the CPU) with dynamic batch, height
    and width; traced at ``image_size``. Written then renamed."""
    import torch

    from retinanet.model import RetinaNetCandidates

    module = RetinaNetCandidates(model.cpu().float()).eval()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".onnx.tmp")
    dynamic = {"images": {0: "batch", 2: "height", 3: "width"}, **{name: {0: "batch"} for name in OUTPUTS}}
    with torch.no_grad():
        torch.onnx.export(
            module, (torch.zeros(1, 3, image_size, image_size),), str(tmp), input_names=["images"],
            output_names=list(OUTPUTS), dynamic_axes=dynamic, opset_version=17, dynamo=False,
        )  # fmt: skip
    tmp.replace(path)
    return path


def write_repository(model: RetinaNet, repository, *, max_batch_size: int = 8, instance_kind: str = "KIND_GPU",
                     image_size: int = 800) -> Path:  # fmt: skip
    """Write the two models of the module docstring into ``repository``; returns its path."""
    import tempfile

    from zoo.triton.repository import ONNX_PYTHON_MODEL, TensorSpec, model_config, write_model

    repo = Path(repository)
    s = model.settings
    count = 5 * s["candidates_per_level"]
    images = [TensorSpec("images", "FP32", [3, -1, -1])]
    batching = {
        "preferred_batch_size": [max(1, max_batch_size // 2), max_batch_size],
        "max_queue_delay_microseconds": 100,
    }
    with tempfile.TemporaryDirectory() as tmp:
        onnx_file = export_onnx(model, Path(tmp) / "model.onnx", image_size=min(image_size, 256))
        cfg = model_config(
            "retinanet_onnx", platform="onnxruntime_onnx", max_batch_size=max_batch_size, inputs=images,
            outputs=[TensorSpec("boxes", "FP32", [count, 4]), TensorSpec("scores", "FP32", [count]),
                     TensorSpec("labels", "INT64", [count])],
            instance_kind=instance_kind, dynamic_batching=batching, parameters={"image_size": image_size},
        )  # fmt: skip
        write_model(repo, cfg, {"model.onnx": onnx_file})
        limit = s["max_detections"]
        settings = {"postprocess": "postprocess.py", "nms_threshold": s["nms_threshold"], "max_detections": limit,
                    "image_size": image_size}  # fmt: skip
        cfg = model_config(
            "retinanet_python", backend="python", max_batch_size=max_batch_size, inputs=images,
            outputs=[
                TensorSpec("detection_boxes", "FP32", [limit, 4]), TensorSpec("detection_scores", "FP32", [limit]),
                TensorSpec("detection_labels", "INT64", [limit]), TensorSpec("num_detections", "INT64", [1]),
            ],
            instance_kind="KIND_CPU", dynamic_batching=batching, parameters=settings,
        )  # fmt: skip
        write_model(
            repo, cfg, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_file, "postprocess.py": POSTPROCESS}
        )
    return repo


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m retinanet.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="model.pt or checkpoint.pt from retinanet.train")
    src.add_argument(
        "--random-init", type=int, metavar="NUM_CLASSES", help="export an untrained model (smoke)"
    )
    p.add_argument("--max-batch-size", type=int, default=8)
    add_repository_args(p, onnx_models="retinanet_onnx")
    a = parse_args(p, argv)
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(a.repository, TRITON_MODELS, force=a.force)

    import torch  # once the repository has passed its check

    from retinanet.evaluate import load_model
    from retinanet.model import RetinaNet

    if a.checkpoint:
        model, info = load_model(a.checkpoint, "cpu")
        image_size = info["image_size"]
    else:
        torch.manual_seed(0)
        model, image_size = RetinaNet(a.random_init), 800
    settings = {
        "max_batch_size": a.max_batch_size,
        "instance_kind": a.instance_kind,
        "image_size": image_size,
    }
    write_repository_models(
        a.repository, TRITON_MODELS, lambda repo: write_repository(model, repo, **settings), force=a.force
    )


if __name__ == "__main__":
    main()
