"""Triton python-backend model ``gpt_python``: text generation with the KV cache by gpt.inference.generate
(the repository carries gpt/model.py and gpt/inference.py beside model.pt). Each request is one prompt;
a bad one (empty, ids beyond the vocabulary, too long) gets an error response naming the problem."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        sys.path.insert(0, folder)
        import torch

        from gpt.inference import load_model

        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        torch.set_num_threads(int(os.environ.get("ZOO_TORCH_THREADS", "1")))
        self.model, _ = load_model(os.path.join(folder, parameters.get("weights", "model.pt")))
        self.vocab_size = self.model.cfg.vocab_size

    def execute(self, requests):
        from gpt.inference import generate

        responses = []
        for request in requests:
            try:
                prompt = pb_utils.get_input_tensor_by_name(request, "prompt_ids").as_numpy().astype(np.int64)
                scalar = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]
                          for name in ("max_new_tokens", "temperature", "top_k", "seed")}  # fmt: skip
                if prompt.size and (prompt.min() < 0 or prompt.max() >= self.vocab_size):
                    raise ValueError(f"'prompt_ids' must lie in 0..{self.vocab_size - 1}")
                ids = generate(
                    self.model,
                    [int(t) for t in prompt.reshape(-1)],
                    max_new_tokens=int(scalar["max_new_tokens"]),
                    temperature=float(scalar["temperature"]),
                    top_k=int(scalar["top_k"]),
                    seed=int(scalar["seed"]),
                )
                out = pb_utils.Tensor("token_ids", np.array(ids, dtype=np.int64))
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            except Exception as e:  # noqa: BLE001 - the client gets the reason, the server goes on
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(e)))
                )
        return responses
