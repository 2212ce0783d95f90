"""Triton model repository for an exported ResNet-50 ONNX file; needs zoo.triton, not MXNet.

Run by ``export.py`` in an interpreter that has ``tritonclient[grpc]`` (config.pbtxt validation).
"""

from __future__ import annotations

import argparse
import json

PYTHON_MODEL = '''"""Triton python backend: ResNet-50 v1.5 (exported from MXNet Gluon) run with onnxruntime."""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("ZOO_ORT_THREADS", "2"))
        self.session = ort.InferenceSession(
            os.path.join(folder, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.input_name = self.session.get_inputs()[0].name
        config = json.loads(args["model_config"])
        self.output_name = config["output"][0]["name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "input").as_numpy().astype(np.float32)
            logits = self.session.run(None, {self.input_name: images})[0]
            out = pb_utils.Tensor(self.output_name, logits.astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


def write_repository(spec: dict) -> list:
    """``spec``: repository, onnx (file), prefix, image_size, num_classes, max_batch_size, instance_kind,
    classes (optional list). Writes <prefix>_onnx and <prefix>_python; returns their folders."""
    from zoo.triton import TensorSpec, model_config, validate_repository, write_model

    size, classes = int(spec["image_size"]), int(spec["num_classes"])
    max_batch = int(spec["max_batch_size"])
    inputs = [TensorSpec("input", "FP32", [3, size, size])]
    outputs = [TensorSpec("logits", "FP32", [classes])]
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
    extra = {}
    if spec.get("classes"):
        extra["labels.txt"] = ("\n".join(spec["classes"]) + "\n").encode()
    folders = [
        write_model(spec["repository"], onnx_config, {"model.onnx": spec["onnx"], **extra}),
        write_model(
            spec["repository"],
            python_config,
            {"model.py": PYTHON_MODEL.encode(), "model.onnx": spec["onnx"], **extra},
        ),
    ]
    validate_repository(spec["repository"])
    return folders


def main(argv=None):
    p = argparse.ArgumentParser(description="Write the Triton repository described by a JSON spec.")
    p.add_argument("--spec", required=True, help="JSON file written by resnet50_mx.export")
    args = p.parse_args(argv)
    with open(args.spec) as f:
        spec = json.load(f)
    try:
        write_repository(spec)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(str(e)) from None


if __name__ == "__main__":
    main()
