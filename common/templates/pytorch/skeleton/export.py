"""Export a trained checkpoint as a Triton model repository.

    python -m skeleton.export --checkpoint results/checkpoint.pt --repository model_repository

Writes ``skeleton_onnx`` (onnxruntime backend, for NVIDIA's Triton container) and ``skeleton_python``
(python backend serving the same ONNX file through zoo's shared model file, for the tritonserver of
the nvidia-pytriton wheel). Both take ``inputs`` [N, 64] FP32 and answer ``logits`` [N, 10].
An existing model folder is replaced only with --force.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.triton.repository import (
    ONNX_PYTHON_MODEL,
    TensorSpec,
    model_config,
    refuse_existing_models,
    write_model,
)

from skeleton.evaluate import load_trained

if TYPE_CHECKING:
    import torch

INPUT_NAME, OUTPUT_NAME = "inputs", "logits"
MODELS = ("onnx", "python")


def export_onnx(model: torch.nn.Module, path) -> pathlib.Path:
    """``model`` as ONNX with a dynamic batch dimension."""
    import torch

    from skeleton.data import FEATURES

    with torch.no_grad():
        torch.onnx.export(
            model, (torch.rand(2, FEATURES) * 16,), str(path), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}, opset_version=17, dynamo=False,
        )  # fmt: skip
    return pathlib.Path(path)


def export_repository(
    model: torch.nn.Module, repository, *, force: bool = False, max_batch_size: int = 64
) -> dict:
    """Write both models into ``repository``; returns {name: folder}. A model the repository already
    holds is a UserError unless ``force`` (then its folder is replaced whole)."""
    from skeleton.data import CLASSES, FEATURES

    repository = pathlib.Path(repository)
    names = {kind: f"skeleton_{kind}" for kind in MODELS}
    refuse_existing_models(repository, names.values(), force=force)
    written = {}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = export_onnx(model.cpu().eval(), pathlib.Path(tmp) / "model.onnx")
        for kind, name in names.items():
            config = model_config(
                name, backend="python" if kind == "python" else None,
                platform="onnxruntime_onnx" if kind == "onnx" else None, max_batch_size=max_batch_size,
                inputs=[TensorSpec(INPUT_NAME, "FP32", [FEATURES])], outputs=[TensorSpec(OUTPUT_NAME, "FP32", [CLASSES])],
                instance_kind="KIND_CPU", instance_count=1, dynamic_batching={"max_queue_delay_microseconds": 100},
            )  # fmt: skip
            files = (
                {"model.onnx": onnx_path}
                if kind == "onnx"
                else {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path}
            )
            written[name] = write_model(repository, config, files, force=force)
            print(f"wrote {name} -> {written[name]}")
    return written


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m skeleton.export", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="a training checkpoint (RESULTS_DIR/checkpoint.pt)")
    p.add_argument("--repository", default="model_repository", help="the Triton model repository to write")
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = p.parse_args(argv)
    refuse_existing_models(args.repository, [f"skeleton_{kind}" for kind in MODELS], force=args.force)
    model, _ = load_trained(args.checkpoint)
    export_repository(model, args.repository, force=args.force)


if __name__ == "__main__":
    main()
