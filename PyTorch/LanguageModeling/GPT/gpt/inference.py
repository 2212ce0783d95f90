"""The inference model: a trained GPT loaded from model.pt (or a training checkpoint folder) and text
generation with a KV cache, greedy or sampled. Evaluation, generate.sh, export and the Triton model use it.

    model, recipe = load_model("results/model.pt")
    ids = generate(model, tokenizer.encode("The for statement").ids, max_new_tokens=32)
"""

from __future__ import annotations

import pathlib

import torch
from zoo.errors import UserError

from gpt.model import GPT, build_model

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
    model = build_model(state["recipe"]["model"], init=False)
    sharded = {"model": model.state_dict()}
    load_training_checkpoint_sharded(path, sharded, needed, "a GPT training checkpoint", flag="--checkpoint")
    model.load_state_dict(sharded["model"])
    return model.to(device).eval(), state["recipe"]


def next_token(logits: torch.Tensor, temperature: float, top_k: int, generator) -> torch.Tensor:
    """The next token of each row of ``logits`` (B, vocab): the most likely at temperature 0, else a
    sample of softmax(logits / temperature) over the ``top_k`` most likely (all with 0)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probabilities = torch.softmax(logits, dim=-1)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)


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
    attending to the KV cache of the earlier ones. Sampling draws from a generator seeded by ``seed``."""
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
    generator = torch.Generator(device=device).manual_seed(seed)
    tokens = torch.tensor([prompt], device=device)
    logits = model(tokens, cache=cache, start=0)[:, -1]
    out = list(prompt)
    while len(out) < total:
        token = next_token(logits, temperature, top_k, generator)
        out.append(int(token))
        if stop_id is not None and out[-1] == stop_id or len(out) == total:
            break
        logits = model(token.view(1, 1), cache=cache, start=len(out) - 1)[:, -1]
    return out
