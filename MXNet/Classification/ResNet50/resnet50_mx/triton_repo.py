"""Triton model repository for an exported ResNet-50 ONNX file; needs zoo.triton, not MXNet.

Run by ``export.py`` in an interpreter that has ``tritonclient[grpc]`` (config.pbtxt validation).
Both models take ``images`` FP32 [3,H,W] (NCHW, normalised) and answer ``logits`` FP32 [classes],
like every ResNet-50 of the zoo; ``<prefix>_python`` is the zoo's shared ONNX model file
(zoo.triton.repository.ONNX_PYTHON_MODEL) over the same model.onnx.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from zoo.cli import entry_point
from zoo.errors import UserError

INPUT_NAME, OUTPUT_NAME = "images", "logits"


def zoo_triton_python() -> str | None:
    """A python with tritonclient[grpc] and nvidia-pytriton: $ZOO_TRITON_PYTHON, else the checkout's
    ``.venv/pytorch/bin/python`` (looked for above this package), else None."""
    if os.environ.get("ZOO_TRITON_PYTHON"):
        return os.environ["ZOO_TRITON_PYTHON"]
    for folder in Path(__file__).resolve().parents:
        candidate = folder / ".venv" / "pytorch" / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    return None


def write_repository(spec: dict) -> list:
    """``spec``: repository, onnx (file), prefix, image_size, num_classes, max_batch_size, instance_kind,
    classes (optional list), force (optional). Writes <prefix>_onnx and <prefix>_python; returns their
    folders. A model the repository already holds is a UserError unless ``force`` (then it is replaced whole)."""
    from zoo.triton.labels import labelled
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        validate_repository,
        write_model,
    )

    force = bool(spec.get("force", False))
    refuse_existing_models(spec["repository"], triton_models(spec["prefix"]), force=force)

    size, classes = int(spec["image_size"]), int(spec["num_classes"])
    max_batch = int(spec["max_batch_size"])
    inputs = [TensorSpec(INPUT_NAME, "FP32", [3, size, size])]
    outputs = [TensorSpec(OUTPUT_NAME, "FP32", [classes])]
    preferred = [b for b in (8, 16, 32, 64, 128) if b <= max_batch] or [max_batch]
    batching = {"preferred_batch_size": preferred, "max_queue_delay_microseconds": 100}
    onnx_config = model_config(
        f"{spec['prefix']}_onnx",
        platform="onnxruntime_onnx",
        max_batch_size=max_batch,
        inputs=inputs,
        outputs=outputs,
        instance_kind=spec.get("instance_kind", "KIND_GPU"),
        dynamic_batching=batching,
    )
    python_config = model_config(
        f"{spec['prefix']}_python",
        backend="python",
        max_batch_size=max_batch,
        inputs=inputs,
        outputs=outputs,
        instance_kind="KIND_CPU",
        dynamic_batching=batching,
    )
    # the class names: labels.txt beside each config.pbtxt, named as its output's label_filename
    onnx_config, labels = labelled(onnx_config, spec.get("classes"))
    python_config, _ = labelled(python_config, spec.get("classes"))
    folders = [
        write_model(
            spec["repository"], onnx_config, {"model.onnx": spec["onnx"]}, force=force, beside_config=labels
        ),
        write_model(
            spec["repository"],
            python_config,
            {"model.py": ONNX_PYTHON_MODEL, "model.onnx": spec["onnx"]},
            force=force,
            beside_config=labels,
        ),
    ]
    validate_repository(spec["repository"])
    return folders


def triton_models(prefix: str) -> list[str]:
    """The names of the models write_repository writes."""
    return [f"{prefix}_onnx", f"{prefix}_python"]


@entry_point
def main(argv=None):
    p = argparse.ArgumentParser(description="Write the Triton repository described by a JSON spec.")
    p.add_argument("--spec", required=True, help="JSON file written by resnet50_mx.export")
    args = p.parse_args(argv)
    with open(args.spec) as f:
        spec = json.load(f)
    try:
        write_repository(spec)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from None


if __name__ == "__main__":
    main()
