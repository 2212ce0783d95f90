"""Export Mask R-CNN to ONNX (one image of any size in, its detections out) and write a Triton model
repository.

    python -m maskrcnn.export --checkpoint results/model.pt --repository triton_repo

Contract of every model: input ``image (3, H, W)`` FP32 in [0, 1], any H and W (the graph normalises
and resizes as the PyTorch model does); outputs ``boxes (N, 4)`` xyxy pixels of the input image,
``labels (N)`` INT64 category ids, ``scores (N)``, ``masks (N, 1, H, W)`` FP32 mask probabilities
(threshold 0.5 for a binary mask). The repository holds:
  maskrcnn_onnx     onnxruntime_onnx (Triton's GPU/CPU onnxruntime backend)
  maskrcnn_python   python backend: the zoo's shared ONNX model file (zoo.triton.repository.ONNX_PYTHON_MODEL)
                    over the same ONNX file, for servers that carry only the python backend
The graph holds torchvision's RPN filter whatever the checkpoint's ``speed.rpn_nms``: the batched
filter's Triton kernels cannot be traced, so it runs torchvision's code while tracing (same proposals).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.coco import add_repository_args, write_repository_models

if TYPE_CHECKING:
    from torch import nn

OUTPUTS = ("boxes", "labels", "scores", "masks")
OPSET = 17
TRITON_MODELS = ("maskrcnn_onnx", "maskrcnn_python")  # what write_repository writes


def export_onnx(model: nn.Module, path, *, sample_size: tuple[int, int] = (160, 192)) -> Path:
    """ONNX file with dynamic image height and width (opset 17), written atomically."""
    import torch

    from maskrcnn.model import SingleImageModel

    module = SingleImageModel(model.eval().float().cpu()).eval()
    sample = torch.rand(3, *sample_size, generator=torch.Generator().manual_seed(0))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".onnx.tmp")
    torch.onnx.export(
        module,
        (sample,),
        str(tmp),
        input_names=["image"],
        output_names=list(OUTPUTS),
        dynamic_axes={
            "image": {1: "height", 2: "width"},
            "boxes": {0: "detections"},
            "labels": {0: "detections"},
            "scores": {0: "detections"},
            "masks": {0: "detections", 2: "height", 3: "width"},
        },
        opset_version=OPSET,
        dynamo=False,
    )
    tmp.replace(path)
    return path


def tensor_specs():
    from zoo.triton.repository import TensorSpec

    inputs = [TensorSpec("image", "FP32", [3, -1, -1])]
    outputs = [
        TensorSpec("boxes", "FP32", [-1, 4]),
        TensorSpec("labels", "INT64", [-1]),
        TensorSpec("scores", "FP32", [-1]),
        TensorSpec("masks", "FP32", [-1, 1, -1, -1]),
    ]
    return inputs, outputs


def write_repository(model: nn.Module, repository, *, instance_kind: str = "KIND_GPU") -> Path:
    """Write the two models of the module docstring into ``repository``; returns its path."""
    from zoo.triton.repository import ONNX_PYTHON_MODEL, model_config, write_model

    repo = Path(repository)
    inputs, outputs = tensor_specs()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_file = export_onnx(model, Path(tmp) / "model.onnx")
        cfg = model_config(
            "maskrcnn_onnx",
            platform="onnxruntime_onnx",
            max_batch_size=0,  # one image per request: sizes differ, the graph takes one image
            inputs=inputs,
            outputs=outputs,
            instance_kind=instance_kind,
        )
        write_model(repo, cfg, {"model.onnx": onnx_file})
        cfg = model_config(
            "maskrcnn_python",
            backend="python",
            max_batch_size=0,
            inputs=inputs,
            outputs=outputs,
            instance_kind="KIND_CPU",
            parameters={"min_value:image": 0, "max_value:image": 1},
        )
        write_model(repo, cfg, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_file})
    return repo


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m maskrcnn.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="model.pt or checkpoint.pt from maskrcnn.train")
    src.add_argument(
        "--random-init",
        metavar="VARIANT",
        choices=("v1", "v2", "tiny"),
        help="export an untrained model (smoke)",
    )
    p.add_argument("--num-classes", type=int, default=91, help="with --random-init")
    add_repository_args(p, onnx_models="maskrcnn_onnx")
    a = parse_args(p, argv)
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(a.repository, TRITON_MODELS, force=a.force)

    import torch  # once the repository has passed its check

    from maskrcnn.evaluate import load_model
    from maskrcnn.model import build_model

    if a.checkpoint:
        model, _ = load_model(a.checkpoint, "cpu")
    else:
        torch.manual_seed(0)
        model = build_model(a.num_classes, variant=a.random_init)
    write_repository_models(
        a.repository, TRITON_MODELS, lambda repo: write_repository(model, repo, instance_kind=a.instance_kind),
        force=a.force,
    )  # fmt: skip


if __name__ == "__main__":
    main()
