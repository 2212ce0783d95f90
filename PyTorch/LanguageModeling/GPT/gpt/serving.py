"""The choice of each next token, numpy only, and the Triton postprocess that generates over ONNX.

``choose_next`` is the one sampler: gpt.inference.generate (PyTorch, generate.sh) and the Triton python
backend (the zoo's ONNX model file with this file as its ``postprocess``) both call it, so the same seed
gives the same text. The postprocess continues the prompt after the exported prefill graph (model.onnx:
the prompt's last logits and its keys and values) with onnxruntime over the exported step
(decoder.onnx: one token after the cached positions).

This file imports only numpy (onnxruntime inside ``postprocess``): Triton loads it by path.
"""

from __future__ import annotations

import os

import numpy as np

_SESSIONS = {}


def choose_next(logits, temperature: float, top_k: int, rng) -> int:
    """The next token from ``logits`` (vocab,): the most likely at temperature 0, else drawn by ``rng``
    (numpy Generator) from softmax(logits / temperature) over the ``top_k`` most likely (all with 0)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(logits))
    scaled = logits / temperature
    if top_k and top_k < scaled.size:
        kth = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled < kth, -np.inf, scaled)
    weights = np.exp(scaled - scaled.max())
    cumulative = np.cumsum(weights / weights.sum())
    return int(min(np.searchsorted(cumulative, rng.random(), side="right"), scaled.size - 1))


def _session(path: str):
    if path not in _SESSIONS:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("ZOO_ORT_THREADS", "0"))
        _SESSIONS[path] = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return _SESSIONS[path]


def postprocess(outputs: dict, parameters: dict) -> dict:
    """One request: the prefill graph's ``outputs`` -> {"token_ids": prompt and continuation}."""
    prompt = [int(t) for t in outputs["prompt"].reshape(-1)]
    max_seq_len, eos = int(parameters["max_seq_len"]), int(parameters["eos_id"])
    if not 0 < len(prompt) < max_seq_len:
        raise ValueError(f"the prompt has {len(prompt)} tokens: give 1..{max_seq_len - 1}")
    new_tokens = int(outputs["new_tokens"].reshape(-1)[0])
    temperature, top_k = float(outputs["temp"].reshape(-1)[0]), int(outputs["k_best"].reshape(-1)[0])
    if new_tokens < 1 or temperature < 0 or top_k < 0:
        raise ValueError("max_new_tokens must be >= 1, temperature and top_k >= 0")
    rng = np.random.default_rng(int(outputs["sampling_seed"].reshape(-1)[0]))
    folder = os.path.dirname(os.path.abspath(__file__))
    step = _session(os.path.join(folder, parameters.get("decoder_file", "decoder.onnx")))
    total = min(max_seq_len, len(prompt) + new_tokens)
    ids, logits = list(prompt), outputs["logits"][0]
    keys, values = outputs["keys"], outputs["values"]
    while len(ids) < total:
        ids.append(choose_next(logits, temperature, top_k, rng))
        if ids[-1] == eos or len(ids) == total:
            break
        feed = {"tokens": np.array([[ids[-1]]], dtype=np.int64), "past_keys": keys, "past_values": values}
        logits, keys, values = step.run(["logits", "keys", "values"], feed)
        logits = logits[0]
    return {"token_ids": np.array(ids, dtype=np.int64)}
