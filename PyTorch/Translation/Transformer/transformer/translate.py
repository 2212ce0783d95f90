"""Translation with the PyTorch model: greedy decoding and beam search (transformer.beam) over the cache.

hyps = translate_ids(model, src, beam=4)          # src (B, S) int64, padded with 0
lines = translate_lines(model, tokenizer, ["twenty-one"], beam=4, device="cpu")
"""

from __future__ import annotations

import numpy as np
import torch

from transformer.beam import beam_search
from transformer.model import BOS, EOS, PAD


def max_lengths(src: torch.Tensor, a: float = 1.2, b: int = 10, positions: int | None = None) -> np.ndarray:
    """The longest translation each source sentence may get: a * its length + b, and no more than the
    decoder's ``positions`` allow (its steps 0..cap take positions 0..cap)."""
    caps = ((src != PAD).sum(dim=1).cpu().numpy() * a).astype(np.int64) + b
    return caps if positions is None else np.minimum(caps, positions - 1)


@torch.no_grad()
def greedy(model, src: torch.Tensor, max_length_a: float = 1.2, max_length_b: int = 10) -> list:
    """Greedy decoding: the argmax token at every step until eos (or the length cap)."""
    cross_k, cross_v, src_mask = model.encode(src)
    batch = src.shape[0]
    self_k, self_v = model.empty_cache(batch, src.device, cross_k.dtype)
    caps = max_lengths(src, max_length_a, max_length_b, model.cfg.max_positions)
    last = torch.full((batch,), BOS, dtype=torch.long, device=src.device)
    out = [[] for _ in range(batch)]
    open_rows = np.ones(batch, dtype=bool)
    for t in range(int(caps.max()) + 1):
        logp, self_k, self_v = model.decode_step(last, cross_k, cross_v, src_mask, self_k, self_v)
        last = logp.argmax(dim=-1)
        chosen = last.cpu().numpy()
        for b in np.flatnonzero(open_rows):
            if chosen[b] == EOS or t >= caps[b]:
                open_rows[b] = False
            else:
                out[b].append(int(chosen[b]))
        if not open_rows.any():
            break
    return out


@torch.no_grad()
def translate_ids(
    model,
    src: torch.Tensor,
    beam: int = 4,
    length_penalty: float = 0.6,
    max_length_a: float = 1.2,
    max_length_b: int = 10,
) -> list:
    """Beam search over ``src`` (B, S); returns each sentence's best token ids (no bos/eos)."""
    cross_k, cross_v, src_mask = model.encode(src)
    batch = src.shape[0]
    cross_k = cross_k.repeat_interleave(beam, dim=1)
    cross_v = cross_v.repeat_interleave(beam, dim=1)
    src_mask = src_mask.repeat_interleave(beam, dim=0)
    cache = list(model.empty_cache(batch * beam, src.device, cross_k.dtype))

    def step(last, order):
        index = torch.from_numpy(order).to(src.device)
        cache[0], cache[1] = cache[0][:, index], cache[1][:, index]
        tokens = torch.from_numpy(last).to(src.device)
        logp, cache[0], cache[1] = model.decode_step(tokens, cross_k, cross_v, src_mask, cache[0], cache[1])
        values, ids = logp.topk(2 * beam, dim=-1)
        return values.float().cpu().numpy(), ids.cpu().numpy()

    caps = max_lengths(src, max_length_a, max_length_b, model.cfg.max_positions)
    return beam_search(step, batch, beam, caps, length_penalty)


def translate_lines(
    model, tokenizer, lines: list, *, beam=4, device="cpu", batch_tokens=4096, **search
) -> list:
    """Detokenised translations of ``lines`` (sorted by length into batches, returned in order)."""
    from transformer.data import encode_line, pad_batch

    encoded = [encode_line(tokenizer, line) for line in lines]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    results = [""] * len(lines)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * len(encoded[order[end]]) <= batch_tokens:
            end += 1
        chunk = order[start:end]
        src = pad_batch([encoded[i] for i in chunk]).to(device)
        hyps = translate_ids(model, src, beam, **search)
        for i, ids in zip(chunk, hyps, strict=True):
            results[i] = tokenizer.decode(ids)
        start = end
    return results
