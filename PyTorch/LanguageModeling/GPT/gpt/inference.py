"""The inference model: a trained GPT loaded from model.pt (or a training checkpoint folder) and text
generation with a KV cache, greedy or sampled. Evaluation, generate.sh, export and the Triton model use it.

    model, recipe = load_model("results/model.pt")
    ids = generate(model, tokenizer.encode("The for statement").ids, max_new_tokens=32)
"""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import torch
from zoo.errors import UserError

from gpt.model import GPT, build_model
from gpt.serving import choose_next

KIND = "gpt"


def load_model(path, device="cpu") -> tuple[GPT, dict]:
    """(model in eval mode, its recipe) from ``path``: model.pt of gpt.train, or a checkpoint/ folder
    (its shards read into one process by torch.distributed.checkpoint)."""
    path = pathlib.Path(path)
    if path.is_dir():
        return _load_checkpoint_folder(path, device)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same to a user
        raise UserError(
            f"{path} is not a GPT model.pt (cannot be read: {str(e).splitlines()[0][:120]})"
        ) from None
    if not isinstance(state, dict) or state.get("kind") != KIND:
        found = state.get("kind") if isinstance(state, dict) else type(state).__name__
        raise UserError(f"{path} is not a GPT model.pt of gpt.train (kind {found!r})")
    model = build_model(state["model_recipe"], init=False)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise UserError(
            f"{path} does not fit its own recipe: {str(e).strip().splitlines()[-1][:200]}"
        ) from None
    return model.to(device).eval(), state["recipe"]


def _load_checkpoint_folder(path: pathlib.Path, device) -> tuple[GPT, dict]:
    from zoo.torch import load_training_checkpoint_sharded

    needed = ("kind", "recipe")
    state = load_training_checkpoint_sharded(
        path, None, needed, "a GPT training checkpoint", flag="--checkpoint"
    )
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process reads the shards
    model = build_model(state["recipe"]["model"], init=False)
    sharded = {"model": model.state_dict()}
    load_training_checkpoint_sharded(path, sharded, needed, "a GPT training checkpoint", flag="--checkpoint")
    model.load_state_dict(sharded["model"])
    return model.to(device).eval(), state["recipe"]


@torch.no_grad()
def generate(
    model: GPT,
    prompt: list[int],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int = 0,
    stop_id: int | None = None,
) -> list[int]:
    """The ``prompt`` ids continued by up to ``max_new_tokens`` tokens (fewer where ``stop_id`` comes or
    the model's max_seq_len is reached); the prompt runs in one forward, each new token in one more,
    attending to the KV cache of the earlier ones. Each token is gpt.serving.choose_next's (numpy,
    seeded by ``seed``), the sampler the Triton model runs too."""
    if not prompt:
        raise UserError("the prompt is empty: give at least one token of text")
    limit = model.cfg.max_seq_len
    if len(prompt) >= limit:
        raise UserError(
            f"the prompt is {len(prompt)} tokens, the model reads at most {limit} (model.max_seq_len)"
        )
    device = model.embedding.weight.device
    total = min(limit, len(prompt) + max_new_tokens)
    cache = model.new_cache(1, total)
    rng = np.random.default_rng(seed)
    logits = model(torch.tensor([prompt], device=device), cache=cache, start=0)[0, -1]
    out = list(prompt)
    while len(out) < total:
        out.append(choose_next(logits.float().cpu().numpy(), temperature, top_k, rng))
        if out[-1] == stop_id or len(out) == total:
            break
        logits = model(torch.tensor([[out[-1]]], device=device), cache=cache, start=len(out) - 1)[0, -1]
    return out


# The two graphs of the ONNX export (gpt.export): prefill and one decoding step over the kv cache.
class Prefill(torch.nn.Module):
    """model.onnx: a prompt (T,) -> its last logits (1, vocab) and keys/values (layers, 1, kv_heads, T,
    head_dim); the request's generation settings pass through to the postprocess."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, prompt_ids, max_new_tokens, temperature, top_k, seed):
        cfg = self.model.cfg
        empty = torch.zeros(cfg.layers, 1, cfg.kv_heads, 0, cfg.head_dim)
        logits, keys, values = self.model.forward_with_past(prompt_ids.unsqueeze(0), empty, empty)
        return (
            logits[:, -1],
            keys,
            values,
            prompt_ids + 0,
            max_new_tokens + 0,
            temperature + 0,
            top_k + 0,
            seed + 0,
        )


class DecodeStep(torch.nn.Module):
    """decoder.onnx: one token (1, 1) after P cached positions -> its logits and the P + 1 keys/values."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, tokens, past_keys, past_values):
        logits, keys, values = self.model.forward_with_past(tokens, past_keys, past_values)
        return logits[:, -1], keys, values
