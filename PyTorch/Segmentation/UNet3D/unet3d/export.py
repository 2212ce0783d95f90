"""Export the trained 3D U-Net to ONNX and write a Triton model repository.

    python -m unet3d.export --checkpoint results/checkpoint.pt --repository triton_repo

The served network takes windows of the training patch size (FP32 [N, 1, D, H, W], N dynamic) and returns
their logits (FP32 [N, 3, D, H, W]); the client runs the sliding window over a whole volume and asks the
server for the windows (``unet3d.deploy``), so a served volume gets the Dice that evaluate.py measures.
Models written:

- ``unet3d_onnx``: platform onnxruntime_onnx, model.onnx, tensors ``windows`` / ``logits``;
- ``unet3d_python``: python backend, the zoo's shared ONNX model file over the same model.onnx on the CPU
  (serves where only the python backend exists, e.g. the tritonserver of the nvidia-pytriton wheel).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
from typing import TYPE_CHECKING

import zoo.cli
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.triton.repository import (
    ONNX_PYTHON_MODEL,
    TensorSpec,
    model_config,
    refuse_existing_models,
    write_model,
)

from unet3d import DEFAULT_RECIPE

if TYPE_CHECKING:
    import torch

INPUT_NAME, OUTPUT_NAME = "windows", "logits"
MODELS = ("onnx", "python")


def export_onnx(model: torch.nn.Module, path, patch, opset: int = 17) -> pathlib.Path:
    """``model`` as ONNX with a dynamic batch of windows, tensors ``windows`` / ``logits``."""
    import torch

    example = torch.randn(1, 1, *patch)
    with torch.no_grad():
        torch.onnx.export(
            model.float().eval(), (example,), str(path), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}, opset_version=opset, dynamo=False,
        )  # fmt: skip
    return pathlib.Path(path)


def export_repository(
    model: torch.nn.Module, repository, *, patch, overlap: float = 0.5, models=MODELS, max_batch_size: int = 4,
    instance_kind: str = "KIND_GPU", force: bool = False,
) -> dict[str, pathlib.Path]:  # fmt: skip
    """Write the chosen models of ``model`` into ``repository``; returns {model name: its folder}. Each
    config.pbtxt records the window shape and overlap the client's sliding window must use. A model the
    repository already holds is a UserError unless ``force`` (then its folder is replaced whole)."""
    refuse_existing_models(repository, [f"unet3d_{kind}" for kind in models], force=force)
    repository = pathlib.Path(repository)
    repository.mkdir(parents=True, exist_ok=True)
    written = {}
    parameters = {
        "patch": json.dumps(list(patch)),
        "overlap": str(overlap),
        "classes": "background,kidney,tumour",
    }
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = export_onnx(model, pathlib.Path(tmp) / "model.onnx", patch)
        for kind in models:
            name = f"unet3d_{kind}"
            config = model_config(
                name, backend="python" if kind == "python" else None,
                platform="onnxruntime_onnx" if kind == "onnx" else None, max_batch_size=max_batch_size,
                inputs=[TensorSpec(INPUT_NAME, "FP32", [1, *patch])],
                outputs=[TensorSpec(OUTPUT_NAME, "FP32", [3, *patch])],
                instance_kind="KIND_CPU" if kind == "python" else instance_kind, dynamic_batching={},
                parameters=parameters,
            )  # fmt: skip
            files = (
                {"model.onnx": onnx_path}
                if kind == "onnx"
                else {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path}
            )
            written[name] = write_model(repository, config, files, force=force)
            print(f"wrote {name} ({config.platform or config.backend}) -> {written[name]}")
    return written


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m unet3d.export", description=__doc__.split("\n")[0])
    zoo.cli.add_run_args(
        p, default_recipe=DEFAULT_RECIPE, resume=False, data_dir=False, results_dir=False, amp=False
    )
    p.add_argument("--checkpoint", default=None, help="training checkpoint or weights file")
    p.add_argument("--pretrained", default=None, help="a registry name (checkpoints.yaml) instead of a file")
    p.add_argument("--repository", default="triton_repo", help="Triton model repository to write")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--max-batch-size", type=int, default=4, help="windows per server batch")
    p.add_argument("--instance-kind", choices=("KIND_GPU", "KIND_CPU"), default="KIND_GPU")
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = zoo.cli.parse_args(p, argv)

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise UserError(f"unknown model kind(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    refuse_existing_models(args.repository, [f"unet3d_{kind}" for kind in models], force=args.force)

    from unet3d.checkpoints import trained_model
    from unet3d.step import patch_shape

    model, recipe = trained_model(zoo.cli.recipe_from_args(args), args.checkpoint, args.pretrained)
    export_repository(
        model, args.repository, patch=patch_shape(recipe), overlap=float(recipe["eval"]["overlap"]), models=models,
        max_batch_size=args.max_batch_size, instance_kind=args.instance_kind, force=args.force,
    )  # fmt: skip


if __name__ == "__main__":
    main()
