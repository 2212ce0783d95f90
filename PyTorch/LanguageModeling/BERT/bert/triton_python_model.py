"""Triton python-backend model: the exported SQuAD ONNX model run with onnxruntime.

Copied into <repository>/bert_squad_python/1/model.py next to model.onnx; imports nothing of the
bert package. Inputs input_ids, token_type_ids, attention_mask (INT64 [batch, seq]); outputs
start_logits, end_logits (FP32 [batch, seq]).
"""

import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

INPUTS = ("input_ids", "token_type_ids", "attention_mask")
OUTPUTS = ("start_logits", "end_logits")


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("BERT_ORT_THREADS", "2"))
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            feed = {
                name: pb_utils.get_input_tensor_by_name(request, name).as_numpy().astype(np.int64)
                for name in INPUTS
            }
            start, end = self.session.run(list(OUTPUTS), feed)
            tensors = [
                pb_utils.Tensor(name, value.astype(np.float32))
                for name, value in zip(OUTPUTS, (start, end), strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
