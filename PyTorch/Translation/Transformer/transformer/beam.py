"""Beam search with a length penalty, numpy only; also the Triton postprocess that runs it over ONNX.

The search is written once, over a ``step(last_tokens, order) -> (values, ids)`` callback: ``order``
(B*K,) says which hypothesis each row of the cache continues (the callback reorders its cache), and
the callback returns, for each of the B*K hypotheses, its ``2K`` best next tokens with their
log-probabilities. PyTorch (transformer.translate) and the Triton python backend (``postprocess``
below, onnxruntime over the exported decoder step) share it, so they translate alike.

A hypothesis' score is its summed log-probability divided by ``length ** length_penalty`` (length
counts the eos token). A sentence stops once K hypotheses have ended; at ``max_length`` steps every
open hypothesis ends. With K = 1 the search is greedy decoding.

This file imports only numpy (onnxruntime inside ``postprocess``): Triton loads it by path.
"""

from __future__ import annotations

import os

import numpy as np

EOS = 2
BOS = 1


def beam_search(step, batch: int, beam: int, max_lengths, length_penalty: float = 0.6) -> list:
    """Best token list (without bos/eos) for each of ``batch`` sentences; ``max_lengths`` (B,) caps each."""
    k = beam
    scores = np.full((batch, k), -np.inf)
    scores[:, 0] = 0.0  # every beam starts as the same hypothesis: expand only the first
    tokens = [[[] for _ in range(k)] for _ in range(batch)]
    finished = [[] for _ in range(batch)]
    done = np.zeros(batch, dtype=bool)
    last = np.full(batch * k, BOS, dtype=np.int64)
    order = np.arange(batch * k, dtype=np.int64)
    max_lengths = np.asarray(max_lengths)
    for t in range(int(max_lengths.max()) + 1):
        values, ids = step(last, order)
        values = values.reshape(batch, k, -1).astype(np.float64)
        ids = ids.reshape(batch, k, -1)
        new_scores = np.full((batch, k), -np.inf)
        new_tokens = [[[] for _ in range(k)] for _ in range(batch)]
        new_last = np.full((batch, k), EOS, dtype=np.int64)
        new_order = np.repeat(np.arange(batch, dtype=np.int64) * k, k).reshape(batch, k)
        for b in range(batch):
            if done[b]:
                continue
            total = (scores[b][:, None] + values[b]).ravel()
            # Best first; a stable sort keeps lower beam/candidate indices first among equal scores.
            ranked = np.argsort(-total, kind="stable")
            width = values.shape[2]
            kept = 0
            for flat in ranked:
                if not np.isfinite(total[flat]):
                    break
                src_beam, cand = divmod(int(flat), width)
                token = int(ids[b, src_beam, cand])
                words = tokens[b][src_beam]
                if token == EOS or t >= max_lengths[b]:
                    length = len(words) + 1
                    finished[b].append((total[flat] / length**length_penalty, words))
                    if len(finished[b]) >= k:
                        break
                    continue
                new_scores[b, kept] = total[flat]
                new_tokens[b][kept] = words + [token]
                new_last[b, kept] = token
                new_order[b, kept] = b * k + src_beam
                kept += 1
                if kept == k:
                    break
            if len(finished[b]) >= k or kept == 0:
                done[b] = True
        if done.all():
            break
        scores, tokens = new_scores, new_tokens
        last, order = new_last.ravel(), new_order.ravel()
    results = []
    for b in range(batch):
        best = max(finished[b], key=lambda item: item[0]) if finished[b] else (0.0, [])
        results.append(best[1])
    return results


def top_candidates(logp: np.ndarray, count: int):
    """The ``count`` best (values, ids) of each row of ``logp`` (N, V), best first."""
    ids = np.argsort(-logp, axis=1, kind="stable")[:, :count]
    return np.take_along_axis(logp, ids, axis=1), ids


def postprocess(outputs: dict, parameters: dict) -> dict:
    """Triton: the encoder's ONNX outputs of one request -> ``{"tokens": (B, T) int64}`` (eos-padded).

    Parameters: ``decoder_file`` (the decoder step's ONNX file beside this one), ``beam``,
    ``length_penalty``, ``max_length_a`` and ``max_length_b`` (a sentence of S source tokens gets at
    most a * S + b target tokens), ``max_positions`` (the decoder's positions cap that too).
    """
    decoder = _decoder(os.path.join(os.path.dirname(os.path.abspath(__file__)), parameters["decoder_file"]))
    beam = int(parameters.get("beam", 4))
    cross_k, cross_v, src_mask = outputs["cross_k"], outputs["cross_v"], outputs["src_mask"]
    batch = src_mask.shape[0]
    src_lengths = src_mask.reshape(batch, -1).sum(axis=1)
    max_lengths = (float(parameters.get("max_length_a", 1.2)) * src_lengths).astype(np.int64) + int(
        parameters.get("max_length_b", 10)
    )
    if "max_positions" in parameters:  # the decoder's position table: steps 0..cap take positions 0..cap
        max_lengths = np.minimum(max_lengths, int(parameters["max_positions"]) - 1)
    layers, _, heads, _, head_dim = cross_k.shape
    state = {
        "cross_k": np.repeat(cross_k, beam, axis=1),
        "cross_v": np.repeat(cross_v, beam, axis=1),
        "src_mask": np.repeat(src_mask, beam, axis=0),
        "self_k": np.zeros((layers, batch * beam, heads, 0, head_dim), dtype=cross_k.dtype),
        "self_v": np.zeros((layers, batch * beam, heads, 0, head_dim), dtype=cross_k.dtype),
    }

    def step(last, order):
        state["self_k"], state["self_v"] = state["self_k"][:, order], state["self_v"][:, order]
        logp, state["self_k"], state["self_v"] = decoder.run(None, {"tokens": last, **state})
        return top_candidates(logp, 2 * beam)

    hypotheses = beam_search(step, batch, beam, max_lengths, float(parameters.get("length_penalty", 0.6)))
    width = max(1, max(len(h) for h in hypotheses))
    tokens = np.full((batch, width), EOS, dtype=np.int64)
    for b, words in enumerate(hypotheses):
        tokens[b, : len(words)] = words
    return {"tokens": tokens}


_DECODERS = {}


def _decoder(path: str):
    if path not in _DECODERS:
        import onnxruntime as ort

        options = ort.SessionOptions()
        threads = int(os.environ.get("ZOO_ORT_THREADS", "0"))
        options.intra_op_num_threads = threads
        _DECODERS[path] = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return _DECODERS[path]
