"""Triton python-backend model: ResNet-50 v1.5 (exported from Keras to ONNX) run with onnxruntime.

Input `images` float32 [batch, size, size, 3] (normalised NHWC), output `logits` float32 [batch, classes].
The ONNX file sits beside this file in the version directory (config parameter `onnx_file`).
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        name = config.get("parameters", {}).get("onnx_file", {}).get("string_value", "model.onnx")
        path = os.path.join(args["model_repository"], args["model_version"], name)
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("ZOO_ORT_THREADS", "0"))
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name

    def execute(self, requests):
        # Dynamic batching hands several requests at once: run them as one batch, split the result.
        batches = [pb_utils.get_input_tensor_by_name(r, "images").as_numpy() for r in requests]
        sizes = [len(b) for b in batches]
        logits = self.session.run(None, {self.input_name: np.concatenate(batches).astype(np.float32)})[0]
        responses, start = [], 0
        for size in sizes:
            out = pb_utils.Tensor("logits", logits[start : start + size].astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            start += size
        return responses
