"""The encoder-decoder Transformer (Vaswani et al. 2017) with shared embeddings and a key/value cache.

    model = Transformer(ModelConfig(vocab_size=32000, d_model=1024, heads=16, ffn=4096))
    logits = model(src, tgt_in)                       # training: (B, T, V)
    cross_k, cross_v, src_mask = model.encode(src)    # once per batch
    logp, self_k, self_v = model.decode_step(tokens, cross_k, cross_v, src_mask, self_k, self_v)

Token ids: 0 pad, 1 bos, 2 eos (the vocabulary of transformer.data puts its specials there). Every
attention goes through ``torch.nn.functional.scaled_dot_product_attention`` with a boolean mask
(True = attend). The decoder's cache is a pair of tensors ``(layers, batch, heads, steps, head_dim)``
(self-attention keys and values so far); the cross-attention keys and values are computed once by
:meth:`Transformer.encode`. The same ``decode_step`` runs in beam search and in the ONNX export.

Two speed levers change how the same weights are multiplied, never the parameters or the state dict:
``fused_qkv`` computes a self-attention's queries, keys and values in one matrix product over the
concatenated q/k/v weights, and ``fused_cross_kv`` every decoder layer's cross-attention keys and
values in one product over the encoder output (one large GEMM instead of 2 x layers small ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from zoo.errors import UserError

from transformer.data import BOS, EOS, PAD, UNK  # noqa: F401  (the special ids, here for the model's users)


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 512
    heads: int = 8
    ffn: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    pre_norm: bool = False
    max_positions: int = 1024
    fused_qkv: bool = False
    fused_cross_kv: bool = False

    @classmethod
    def from_recipe(cls, model: dict, vocab_size: int) -> ModelConfig:
        """The recipe's ``model:`` mapping (any subset of the fields) with the vocabulary's size."""
        known = {f.name for f in fields(cls)} - {"vocab_size"}
        unknown = sorted(set(model) - known)
        if unknown:
            raise UserError(f"unknown model keys {unknown}; known: {sorted(known)}")
        return cls(vocab_size=vocab_size, **model)


def sinusoids(positions: int, dim: int) -> torch.Tensor:
    """The fixed sinusoidal position table (positions, dim): sines in the first half, cosines in the second."""
    half = dim // 2
    scale = math.log(10000.0) / max(half - 1, 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -scale)
    angles = torch.arange(positions, dtype=torch.float32)[:, None] * freqs[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return F.pad(table, (0, dim - 2 * half))


def concatenated_linear(x: torch.Tensor, layers: list) -> torch.Tensor:
    """``torch.cat([layer(x) for layer in layers], -1)`` as one matrix product over the stacked weights."""
    weight = torch.cat([layer.weight for layer in layers])
    bias = torch.cat([layer.bias for layer in layers])
    return F.linear(x, weight, bias)


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, fused_qkv: bool = False):
        super().__init__()
        if d_model % heads:
            raise UserError(f"d_model {d_model} is not a multiple of heads {heads}")
        self.heads = heads
        self.dropout = dropout
        self.fused_qkv = fused_qkv
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, D/H)."""
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def qkv(self, x: torch.Tensor) -> tuple:
        """Self-attention queries, keys and values of ``x`` (B, T, D), each split (B, H, T, D/H)."""
        # fused in training only: a decoding step would concatenate (and cast) the weights for one token
        if not (self.fused_qkv and self.training):
            return self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        b, t, d = x.shape
        qkv = concatenated_linear(x, [self.q, self.k, self.v]).view(b, t, 3, self.heads, d // self.heads)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, causal: bool = False):
        """Split queries against split keys/values; returns (B, Tq, D)."""
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal,
        )
        b, h, t, dh = out.shape
        return self.out(out.transpose(1, 2).reshape(b, t, h * dh))


class Layer(nn.Module):
    """An encoder layer (self-attention, feed-forward) or, with ``cross``, a decoder layer."""

    def __init__(self, cfg: ModelConfig, cross: bool):
        super().__init__()
        self.pre_norm = cfg.pre_norm
        self.self_attn = Attention(cfg.d_model, cfg.heads, cfg.attention_dropout, cfg.fused_qkv)
        self.self_norm = nn.LayerNorm(cfg.d_model)
        self.cross_attn = Attention(cfg.d_model, cfg.heads, cfg.attention_dropout) if cross else None
        self.cross_norm = nn.LayerNorm(cfg.d_model) if cross else None
        self.ffn = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ffn),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.ffn, cfg.d_model),
        )
        self.ffn_norm = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def residual(self, x, norm, sublayer):
        if self.pre_norm:
            return x + self.drop(sublayer(norm(x)))
        return norm(x + self.drop(sublayer(x)))

    def encode(self, x, src_mask):
        attn = self.self_attn

        def self_attention(h):
            return attn.attend(*attn.qkv(h), src_mask)

        x = self.residual(x, self.self_norm, self_attention)
        return self.residual(x, self.ffn_norm, self.ffn)

    def decode(self, x, cross_k, cross_v, src_mask, past_k=None, past_v=None):
        """Full sequences (past None: causal mask) or new steps after a cache; returns x, keys, values."""
        attn = self.self_attn
        kept = {}

        def self_attention(h):
            q, k, v = attn.qkv(h)
            if past_k is not None:
                k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
            kept["k"], kept["v"] = k, v
            # One new step sees every cached one: no mask; full sequences are causal.
            return attn.attend(q, k, v, None, causal=past_k is None)

        def cross_attention(h):
            cross = self.cross_attn
            return cross.attend(cross.split(cross.q(h)), cross_k, cross_v, src_mask)

        x = self.residual(x, self.self_norm, self_attention)
        x = self.residual(x, self.cross_norm, cross_attention)
        return self.residual(x, self.ffn_norm, self.ffn), kept["k"], kept["v"]


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[PAD].zero_()
        self.register_buffer("positions", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        self.encoder = nn.ModuleList(Layer(cfg, cross=False) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(Layer(cfg, cross=True) for _ in range(cfg.decoder_layers))
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        for name, param in self.named_parameters():
            if param.ndim == 2 and not name.startswith("embed"):
                nn.init.xavier_uniform_(param)

    def embed_tokens(self, tokens: torch.Tensor, start) -> torch.Tensor:
        length = tokens.shape[1]
        positions = self.positions[start : start + length]
        return self.drop(self.embed(tokens) * math.sqrt(self.cfg.d_model) + positions)

    def memory(self, src: torch.Tensor):
        """Encoder output (B, S, D) and the source mask (B, 1, 1, S), True at real tokens."""
        src_mask = (src != PAD)[:, None, None, :]
        x = self.embed_tokens(src, 0)
        for layer in self.encoder:
            x = layer.encode(x, src_mask)
        return self.encoder_norm(x), src_mask

    def encode(self, src: torch.Tensor):
        """``(cross_k, cross_v, src_mask)``: every decoder layer's cross-attention keys and values,
        stacked (layers, B, H, S, D/H), and the source mask (B, 1, 1, S)."""
        memory, src_mask = self.memory(src)
        attns = [layer.cross_attn for layer in self.decoder]
        if not self.cfg.fused_cross_kv:
            keys = torch.stack([attn.split(attn.k(memory)) for attn in attns])
            values = torch.stack([attn.split(attn.v(memory)) for attn in attns])
            return keys, values, src_mask
        b, s, d = memory.shape
        heads = self.cfg.heads
        projections = [linear for attn in attns for linear in (attn.k, attn.v)]
        kv = concatenated_linear(memory, projections).view(b, s, len(attns), 2, heads, d // heads)
        keys, values = kv.permute(3, 2, 0, 4, 1, 5).unbind(0)
        return keys, values, src_mask

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.decoder_norm(x), self.embed.weight)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, V) of ``tgt_in`` (bos + target) given ``src``."""
        cross_k, cross_v, src_mask = self.encode(src)
        x = self.embed_tokens(tgt_in, 0)
        for i, layer in enumerate(self.decoder):
            x, _, _ = layer.decode(x, cross_k[i], cross_v[i], src_mask)
        return self.logits(x)

    def empty_cache(self, batch: int, device=None, dtype=torch.float32):
        """The self-attention cache before the first step: (layers, batch, heads, 0, head_dim) twice."""
        cfg = self.cfg
        shape = (cfg.decoder_layers, batch, cfg.heads, 0, cfg.d_model // cfg.heads)
        return torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)

    def decode_step(self, tokens, cross_k, cross_v, src_mask, self_k, self_v):
        """One decoder step: ``tokens`` (B,) the last token of each hypothesis; the step's position is
        the cache's length. Returns log-probabilities (B, V) and the cache grown by one step."""
        x = self.embed_tokens(tokens[:, None], self_k.shape[3])
        new_k, new_v = [], []
        for i, layer in enumerate(self.decoder):
            x, k, v = layer.decode(x, cross_k[i], cross_v[i], src_mask, self_k[i], self_v[i])
            new_k.append(k)
            new_v.append(v)
        logp = torch.log_softmax(self.logits(x[:, 0]).float(), dim=-1)
        return logp, torch.stack(new_k), torch.stack(new_v)


def build_model(model_recipe: dict, vocab_size: int) -> Transformer:
    """The one model builder (training, evaluation, benchmark and export call it)."""
    return Transformer(ModelConfig.from_recipe(model_recipe, vocab_size))


# The two graphs of the ONNX export (transformer.export): the encoder and one decoding step.
class ExportEncoder(nn.Module):
    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_tokens):
        return self.model.encode(src_tokens)


class ExportDecoderStep(nn.Module):
    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, tokens, cross_k, cross_v, src_mask, self_k, self_v):
        return self.model.decode_step(tokens, cross_k, cross_v, src_mask, self_k, self_v)
