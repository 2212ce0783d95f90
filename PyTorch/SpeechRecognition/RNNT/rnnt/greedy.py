"""Greedy transducer decoding in numpy over the exported prediction and joint networks: the Triton
python backend's postprocess (rnnt.export), the same loop as rnnt.model.greedy_decode.

This file imports only numpy (onnxruntime inside ``postprocess``): Triton loads it by path.
"""

from __future__ import annotations

import os

import numpy as np


def greedy_search(
    enc, enc_lengths, predict, joint, blank: int, max_symbols_per_step: int = 30, max_symbols: int = 300
) -> np.ndarray:
    """(B, N) int64 label ids, -1-padded. ``enc`` (B, T, J) is the projected encoder output;
    ``predict(tokens (B, 1), state) -> (g (B, J), state)`` with state None at the start;
    ``joint(f (B, J), g (B, J)) -> logits (B, V + 1)``."""
    batch, frames, _ = enc.shape
    g, state = predict(np.full((batch, 1), blank, dtype=np.int64), None)
    emitted = np.zeros(batch, dtype=np.int64)
    out = np.full((batch, max_symbols), -1, dtype=np.int64)
    for t in range(frames):
        open_rows = (t < enc_lengths) & (emitted < max_symbols)
        for _ in range(max_symbols_per_step):
            best = joint(enc[:, t], g).argmax(axis=-1)
            emit = open_rows & (best != blank)
            if not emit.any():
                break
            rows = np.nonzero(emit)[0]
            out[rows, emitted[rows]] = best[rows]
            emitted = emitted + emit
            g_new, state_new = predict(best[:, None].astype(np.int64), state)
            g = np.where(emit[:, None], g_new, g)
            state = tuple(
                np.where(emit[None, :, None], new, old) for new, old in zip(state_new, state, strict=True)
            )
            open_rows = emit & (emitted < max_symbols)
    return out[:, : max(1, int(emitted.max()))]


def postprocess(outputs: dict, parameters: dict) -> dict:
    """Triton: the encoder's ONNX outputs of one request -> ``{"tokens": (B, N) int64}`` (-1-padded).

    Parameters: ``decoder_file`` and ``joint_file`` (ONNX files beside this one), ``blank``,
    ``pred_layers``, ``pred_hidden``, ``max_symbols_per_step``, ``max_symbols``.
    """
    folder = os.path.dirname(os.path.abspath(__file__))
    decoder = _session(os.path.join(folder, parameters["decoder_file"]))
    joint_net = _session(os.path.join(folder, parameters["joint_file"]))
    layers, hidden = int(parameters["pred_layers"]), int(parameters["pred_hidden"])

    def predict(tokens, state):
        if state is None:
            zeros = np.zeros((layers, len(tokens), hidden), dtype=np.float32)
            state = (zeros, zeros)
        g, h, c = decoder.run(None, {"tokens": tokens, "h": state[0], "c": state[1]})
        return g, (h, c)

    def joint(f, g):
        return joint_net.run(None, {"f": f, "g": g})[0]

    tokens = greedy_search(
        outputs["enc"],
        outputs["enc_lengths"],
        predict,
        joint,
        int(parameters["blank"]),
        int(parameters.get("max_symbols_per_step", 30)),
        int(parameters.get("max_symbols", 300)),
    )
    return {"tokens": tokens}


_SESSIONS = {}


def _session(path: str):
    if path not in _SESSIONS:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("ZOO_ORT_THREADS", "0"))
        _SESSIONS[path] = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return _SESSIONS[path]
