"""One decoder-only transformer in two shapes, chosen by the recipe's ``model.shape``:

- ``gpt3``: learned positions, LayerNorm with biases, GeLU MLP (4x), biases in every linear layer, the
  output projection tied to the token embedding (GPT-2 / GPT-3);
- ``llama``: rotary positions (RoPE, the rotate-half layout of Hugging Face's Llama), RMSNorm, SwiGLU MLP,
  grouped-query attention (``kv_heads`` < ``heads``), no biases (Llama 3).

Attention is ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on a GPU). Heads are
read from the projections' widths, so tensor parallelism (gpt.parallel) can shard them without a change.

    model = build_model(recipe["model"])
    logits = model(tokens)                                   # (B, T) -> (B, T, vocab)
    cache = model.new_cache(batch=2, length=64)              # generation: one step at a time
    logits = model(tokens[:, :5], cache=cache, start=0); logits = model(next_token, cache=cache, start=5)
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import torch
import torch.nn.functional as F
from torch import nn
from zoo.errors import UserError

SHAPES = ("gpt3", "llama")
CHECKPOINTING = ("none", "selective", "full")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The recipe's ``model:`` section, typed (every key is a recipe key)."""

    shape: str
    vocab_size: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn_dim: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    tie_embeddings: bool = True
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def check(self) -> ModelConfig:
        if self.shape not in SHAPES:
            raise UserError(f"model.shape must be one of {', '.join(SHAPES)}, not {self.shape!r}")
        for key in ("vocab_size", "dim", "layers", "heads", "kv_heads", "ffn_dim", "max_seq_len"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise UserError(f"model.{key} must be a positive integer, not {getattr(self, key)!r}")
        if self.dim % self.heads or self.heads % self.kv_heads:
            raise UserError(
                f"model.dim {self.dim} must divide into model.heads {self.heads}, and heads into "
                f"model.kv_heads {self.kv_heads}"
            )
        if self.shape == "gpt3" and self.kv_heads != self.heads:
            raise UserError(
                "model.kv_heads must equal model.heads in the gpt3 shape (no grouped-query attention)"
            )
        if self.shape == "llama" and self.head_dim % 2:
            raise UserError(f"rotary positions need an even head size, not {self.head_dim}")
        return self

    def parameters(self) -> int:
        """Parameters of the model (embeddings included, a tied output counted once)."""
        attention = self.dim * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = (3 if self.shape == "llama" else 2) * self.dim * self.ffn_dim
        embeddings = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
        positions = self.max_seq_len * self.dim if self.shape == "gpt3" else 0
        return self.layers * (attention + mlp) + embeddings + positions

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward): 6 x the matmul parameters plus
        attention's 6 x layers x seq_len x dim x 2 (causal halves the score matmuls: PaLM's count / 2)."""
        matmul_params = self.parameters() - self.vocab_size * self.dim * (0 if self.tie_embeddings else 1)
        matmul_params -= self.max_seq_len * self.dim if self.shape == "gpt3" else 0
        return 6.0 * matmul_params + 6.0 * self.layers * seq_len * self.dim


def model_config(section: dict) -> ModelConfig:
    """``recipe["model"]`` as a checked ModelConfig; an unknown or missing key is a UserError."""
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(section) - fields)
    if unknown:
        raise UserError(f"unknown model key(s) {', '.join(unknown)} (known: {', '.join(sorted(fields))})")
    try:
        return ModelConfig(**section).check()
    except TypeError as e:
        raise UserError(f"model: {e}") from None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(head_dim: int, length: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (length, head_dim): Hugging Face Llama's rotate-half layout."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate ``x`` (B, heads, T, head_dim) by the tables' rows for its positions (T, head_dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).type_as(x)


class KVCache:
    """Keys and values of every layer for generation: (layers, B, kv_heads, length, head_dim) each."""

    def __init__(self, cfg: ModelConfig, batch: int, length: int, device, dtype):
        shape = (cfg.layers, batch, cfg.kv_heads, length, cfg.head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)

    def update(self, layer: int, start: int, keys, values):
        """Store this step's keys/values at ``start``; return every position's up to the step's end."""
        end = start + keys.shape[2]
        self.keys[layer, :, :, start:end] = keys
        self.values[layer, :, :, start:end] = values
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        bias = cfg.shape == "gpt3"
        self.layer, self.head_dim, self.shape = layer, cfg.head_dim, cfg.shape
        self.wq = nn.Linear(cfg.dim, cfg.heads * cfg.head_dim, bias=bias)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=bias)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=bias)
        self.wo = nn.Linear(cfg.heads * cfg.head_dim, cfg.dim, bias=bias)

    def forward(self, x, rope, cache: KVCache | None, start: int):
        batch, length, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds its share of the heads.
        q = self.wq(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        if rope is not None:
            cos, sin = rope[0][start : start + length], rope[1][start : start + length]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer, start, k, v)
        mask, causal = None, True
        if k.shape[2] != length:  # cached positions before this step's: query i sees keys <= start + i
            causal = False
            mask = torch.ones(length, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - length)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
        )
        return self.wo(out.transpose(1, 2).reshape(batch, length, -1))


def attend_with_past(attention: Attention, x, cos, sin, past_k, past_v):
    """``attention`` over ``x`` (B, T, dim) after ``past_k``/``past_v`` (B, kv_heads, P, head_dim) of the
    earlier positions (P may be 0): (output, keys and values of all P + T positions). Written with
    concatenation, an explicit mask and repeated KV heads, so that it exports to ONNX."""
    batch, length, _ = x.shape
    q = attention.wq(x).view(batch, length, -1, attention.head_dim).transpose(1, 2)
    k = attention.wk(x).view(batch, length, -1, attention.head_dim).transpose(1, 2)
    v = attention.wv(x).view(batch, length, -1, attention.head_dim).transpose(1, 2)
    if cos is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
    total = k.shape[2]
    rows = torch.arange(length, device=x.device).unsqueeze(1) + (total - length)
    mask = torch.arange(total, device=x.device).unsqueeze(0) <= rows
    repeat = q.shape[1] // k.shape[1]
    keys, values = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    return attention.wo(out.transpose(1, 2).reshape(batch, length, -1)), k, v


class MLP(nn.Module):
    """GeLU MLP (gpt3: w1 then w2) or SwiGLU (llama: w2(silu(w1 x) * w3 x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        bias = cfg.shape == "gpt3"
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=bias)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=bias)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False) if cfg.shape == "llama" else None

    def forward(self, x):
        if self.w3 is None:
            return self.w2(F.gelu(self.w1(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def norm_layer(cfg: ModelConfig) -> nn.Module:
    return nn.LayerNorm(cfg.dim, eps=cfg.norm_eps) if cfg.shape == "gpt3" else RMSNorm(cfg.dim, cfg.norm_eps)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attention_norm = norm_layer(cfg)
        self.attention = Attention(cfg, layer)
        self.mlp_norm = norm_layer(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x, rope, cache: KVCache | None = None, start: int = 0):
        x = x + self.attention(self.attention_norm(x), rope, cache, start)
        return x + self.mlp(self.mlp_norm(x))


def _save_matmuls_and_attention(ctx, op, *args, **kwargs):
    """Selective activation checkpointing: keep matmul and attention outputs, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    saved = {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    }
    return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE


class GPT(nn.Module):
    """The decoder. ``forward(tokens, cache=None, start=0)`` -> logits (B, T, vocab), fp32 under autocast
    only where the output layer says so. ``checkpointing`` ("none", "selective", "full") recomputes each
    block's activations in the backward (gpt.parallel sets it from the recipe)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.checkpointing = "none"
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.positions = nn.Embedding(cfg.max_seq_len, cfg.dim) if cfg.shape == "gpt3" else None
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.norm = norm_layer(cfg)
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self._rope_length = 0
        self._rope = None

    def rope(self, length: int, device):
        if self.cfg.shape != "llama":
            return None
        if self._rope is None or self._rope_length < length or self._rope[0].device != torch.device(device):
            self._rope = rope_tables(
                self.cfg.head_dim, max(length, self.cfg.max_seq_len), self.cfg.rope_theta, device
            )
            self._rope_length = self._rope[0].shape[0]
        return self._rope

    def new_cache(self, batch: int, length: int, dtype=None) -> KVCache:
        weight = self.embedding.weight
        return KVCache(self.cfg, batch, length, weight.device, dtype or weight.dtype)

    def forward(self, tokens, cache: KVCache | None = None, start: int = 0):
        length = tokens.shape[1]
        if start + length > self.cfg.max_seq_len:
            raise UserError(
                f"a sequence of {start + length} tokens is longer than the model's {self.cfg.max_seq_len} "
                "(model.max_seq_len)"
            )
        x = self.embedding(tokens)
        if self.positions is not None:
            x = x + self.positions(torch.arange(start, start + length, device=tokens.device))
        rope = self.rope(start + length, tokens.device)
        for block in self.blocks:
            x = self._run_block(block, x, rope, cache, start)
        x = self.norm(x)
        if self.output is None:
            return F.linear(x, self.embedding.weight)
        return self.output(x)

    def forward_with_past(self, tokens, past_k, past_v):
        """(logits (B, T, vocab), keys and values (layers, B, kv_heads, P + T, head_dim)) of ``tokens``
        after ``past_k``/``past_v`` of P earlier positions: the export-friendly form of a cached step
        (gpt.export writes it to ONNX for Triton)."""
        length, start = tokens.shape[1], past_k.shape[3]
        x = self.embedding(tokens)
        if self.positions is not None:
            x = x + self.positions(torch.arange(length, device=tokens.device) + start)
        cos = sin = None
        if self.cfg.shape == "llama":
            table_cos, table_sin = rope_tables(
                self.cfg.head_dim, self.cfg.max_seq_len, self.cfg.rope_theta, tokens.device
            )
            cos, sin = table_cos[start : start + length], table_sin[start : start + length]
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            out, k, v = attend_with_past(
                block.attention, block.attention_norm(x), cos, sin, past_k[i], past_v[i]
            )
            x = x + out
            x = x + block.mlp(block.mlp_norm(x))
            keys.append(k)
            values.append(v)
        x = self.norm(x)
        logits = F.linear(x, self.embedding.weight) if self.output is None else self.output(x)
        return logits, torch.stack(keys), torch.stack(values)

    def _run_block(self, block, x, rope, cache, start):
        if self.checkpointing == "none" or not torch.is_grad_enabled():
            return block(x, rope, cache, start)
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        if self.checkpointing == "full":
            return checkpoint(block, x, rope, use_reentrant=False)
        return checkpoint(
            block,
            x,
            rope,
            use_reentrant=False,
            context_fn=lambda: create_selective_checkpoint_contexts(_save_matmuls_and_attention),
        )


def initial_value(name: str, shape, cfg: ModelConfig, generator, device) -> torch.Tensor:
    """GPT-2's initialisation of the parameter ``name``: normal(0, init_std), the residual branches' output
    projections scaled by 1/sqrt(2 x layers), zero biases, unit norms; the whole (unsharded) tensor."""
    value = torch.empty(shape, device=device)
    if name.endswith("bias"):
        return value.zero_()
    if len(shape) == 1:
        return value.fill_(1.0)
    std = (
        cfg.init_std / math.sqrt(2 * cfg.layers)
        if name.endswith(("wo.weight", "w2.weight"))
        else cfg.init_std
    )
    return value.normal_(0.0, std, generator=generator)


@torch.no_grad()
def init_parameters(model: GPT, seed: int) -> None:
    """Set every parameter to :func:`initial_value`, drawn from a generator seeded by ``seed`` and the
    parameter's name, so the weights do not depend on how they are spread: a DTensor (tensor parallel,
    FSDP2) takes its own shard of the same whole tensor. Works on a model built on the meta device and
    spread before it was materialised (``to_empty``): no rank ever holds more than one whole parameter."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    for name, param in model.named_parameters():
        device = param.device if not isinstance(param, DTensor) else param.to_local().device
        generator = torch.Generator(device=device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        whole = initial_value(name, tuple(param.shape), model.cfg, generator, device)
        if isinstance(param, DTensor):
            whole = distribute_tensor(whole, param.device_mesh, param.placements, src_data_rank=None)
        param.copy_(whole.to(param.dtype))


def build_model(section: dict, device=None, *, init: bool = True, seed: int = 0) -> GPT:
    """The model of ``recipe["model"]`` on ``device`` ("meta": no memory, to be spread and then
    initialised with :func:`init_parameters`); initialised from ``seed`` unless ``init`` is False."""
    cfg = model_config(section)
    with torch.device(device or "cpu"):
        model = GPT(cfg)
    if init and torch.device(device or "cpu").type != "meta":
        init_parameters(model, seed)
    return model
