"""BERT encoder, pretraining heads (MLM + NSP) and the SQuAD span head.

Attention runs through `scaled_dot_product_attention`. A sample may hold several sequences
("packing"): `seq_ids` gives each token the index (1, 2, ...) of the sequence it belongs to, 0 for
padding, and attention is kept inside each sequence by a block-diagonal mask; `position_ids`
restart at 0 for every sequence. An unpacked batch is the special case seq_ids = attention_mask.

The masked-LM head is evaluated only at the masked positions: the hidden states are gathered at
`mlm_positions` before the vocabulary projection, which is most of the head's cost.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from zoo.bert import CONFIGS, BertConfig, bert_config  # noqa: F401 - the sizes both BERTs share, re-exported


def attention_mask_from_seq_ids(seq_ids: torch.Tensor) -> torch.Tensor:
    """[B, T] sequence ids -> [B, 1, T, T] boolean mask: True where query and key share a sequence.

    Padding (id 0) attends only to padding, so no row is all-False (which would give NaN) and no
    real token ever sees padding.
    """
    return (seq_ids[:, None, :, None] == seq_ids[:, None, None, :]).contiguous()


def packed_position_ids(seq_ids: torch.Tensor) -> torch.Tensor:
    """Position ids that restart at 0 at every change of sequence id along each row."""
    batch, length = seq_ids.shape
    index = torch.arange(length, device=seq_ids.device).expand(batch, length)
    starts = torch.ones_like(seq_ids, dtype=torch.bool)
    starts[:, 1:] = seq_ids[:, 1:] != seq_ids[:, :-1]
    start_index = torch.where(starts, index, torch.zeros_like(index))
    return index - torch.cummax(start_index, dim=1).values


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, input_ids, token_type_ids, position_ids):
        x = self.word(input_ids) + self.position(position_ids) + self.token_type(token_type_ids)
        return self.dropout(self.norm(x))


class BertLayer(nn.Module):
    """Post-LayerNorm transformer layer; query/key/value projections fused into one matmul."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.fp32_residual = config.fp32_residual
        self.attention_dropout = config.attention_dropout
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.attn_out = nn.Linear(config.hidden_size, config.hidden_size)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, hidden = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.num_heads, hidden // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        p = self.attention_dropout if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        context = context.transpose(1, 2).reshape(batch, length, hidden)
        y = self.dropout(self.attn_out(context))
        x = self._residual(self.attn_norm(x + y), y.dtype)
        y = self.dropout(self.ffn_out(F.gelu(self.ffn_in(x))))
        return self._residual(self.ffn_norm(x + y), y.dtype)

    def _residual(self, normed: torch.Tensor, compute_dtype: torch.dtype) -> torch.Tensor:
        """The LayerNorm output (fp32 under autocast) in the matmuls' dtype unless fp32_residual."""
        return normed if self.fp32_residual else normed.to(compute_dtype)


class BertModel(nn.Module):
    """The encoder: embeddings, `num_layers` transformer layers and (optionally) the pooler."""

    def __init__(self, config: BertConfig, *, with_pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if with_pooler else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        seq_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states [B, T, H]. Give `attention_mask` (1 = token, 0 = pad) or `seq_ids`
        (packed samples); neither means every token attends to every token (fastest kernels)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            if seq_ids is not None:
                position_ids = packed_position_ids(seq_ids)
            else:
                position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        if seq_ids is None and attention_mask is not None:
            seq_ids = attention_mask.long()
        mask = attention_mask_from_seq_ids(seq_ids) if seq_ids is not None else None
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def pool(self, hidden: torch.Tensor, cls_positions: torch.Tensor | None = None) -> torch.Tensor:
        """tanh(W h_cls): the [CLS] token's state, at position 0 or at `cls_positions` [B, S]."""
        if cls_positions is None:
            first = hidden[:, 0]
        else:
            first = gather_positions(hidden, cls_positions)
        return torch.tanh(self.pooler(first))


def gather_positions(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """hidden [B, T, H], positions [B, P] -> [B, P, H]."""
    index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
    return torch.gather(hidden, 1, index)


class BertForPreTraining(nn.Module):
    """Encoder + masked-LM head (decoder tied to the word embeddings) + next-sentence head."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm_dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlm_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.nsp = nn.Linear(config.hidden_size, 2)
        init_weights(self, config)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.mlm_norm(F.gelu(self.mlm_dense(hidden)))
        return F.linear(h, self.bert.embeddings.word.weight, self.mlm_bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        seq_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        cls_positions: torch.Tensor | None = None,
        next_sentence: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(mlm_logits, nsp_logits). mlm_logits is [B, P, V] at `mlm_positions` [B, P], or
        [B, T, V] for every token when no positions are given (used only to compare with other
        implementations). nsp_logits is [B, 2] from position 0, [B, S, 2] at `cls_positions`, or
        None with next_sentence=False (pooler and NSP head unused)."""
        hidden = self.bert(input_ids, token_type_ids, attention_mask, seq_ids, position_ids)
        if mlm_positions is not None:
            hidden_masked = gather_positions(hidden, mlm_positions)
        else:
            hidden_masked = hidden
        if not next_sentence:
            return self.mlm_logits(hidden_masked), None
        return self.mlm_logits(hidden_masked), self.nsp(self.bert.pool(hidden, cls_positions))


def pretraining_loss(
    mlm_logits: torch.Tensor,
    mlm_labels: torch.Tensor,
    nsp_logits: torch.Tensor | None = None,
    nsp_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(total loss, mlm loss). Labels of -100 are ignored (padding of the positions / sequences)."""
    mlm = F.cross_entropy(mlm_logits.flatten(0, -2).float(), mlm_labels.flatten(), ignore_index=-100)
    if nsp_labels is None:
        return mlm, mlm.detach()
    nsp = F.cross_entropy(nsp_logits.flatten(0, -2).float(), nsp_labels.flatten(), ignore_index=-100)
    return mlm + nsp, mlm.detach()


class BertForQuestionAnswering(nn.Module):
    """Encoder + a linear layer giving start and end logits per token (SQuAD)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, with_pooler=False)
        self.qa = nn.Linear(config.hidden_size, 2)
        init_weights(self, config)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        start, end = self.qa(hidden).float().unbind(-1)
        return start, end


def init_weights(model: nn.Module, config: BertConfig) -> None:
    """Truncated-normal(0.02) weights, zero biases, unit LayerNorms (the original recipe)."""
    std = config.initializer_range
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
