"""The DLRM network: bottom MLP, embedding bags, dot or DCNv2 interaction, top MLP.

Inputs everywhere: ``dense`` float32 [B, 13] (log-transformed counts) and ``sparse`` int64
[B, sum(hotness)]: table t's ``hotness[t]`` indices, tables in order. The embedding part is either
``PlainEmbeddingBags`` (one ``nn.EmbeddingBag`` per table, no fbgemm) or a TorchRec
``EmbeddingBagCollection`` (``dlrm.sharding``); both name their weights
``sparse.ebc.embedding_bags.<table>.weight`` so that checkpoints move between them.
"""

from __future__ import annotations

import torch
from torch import nn

INIT_BLOCK_ROWS = 65536


def table_rows_init(
    num_rows: int, dim: int, table: int, seed: int, row_start: int, row_stop: int
) -> torch.Tensor:
    """Rows [row_start, row_stop) of table ``table``'s initial weights, uniform(+-1/sqrt(num_rows)).

    Drawn in blocks of INIT_BLOCK_ROWS rows, each from its own generator, so that any shard of a
    table gets the same values as the whole table would (sharded and single-device runs start equal).
    """
    bound = num_rows**-0.5
    out = torch.empty(row_stop - row_start, dim)
    first, last = row_start // INIT_BLOCK_ROWS, (row_stop - 1) // INIT_BLOCK_ROWS
    for block in range(first, last + 1):
        lo = block * INIT_BLOCK_ROWS
        hi = min(lo + INIT_BLOCK_ROWS, num_rows)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + table * 10_007 + block)
        values = torch.empty(hi - lo, dim).uniform_(-bound, bound, generator=gen)
        a, b = max(lo, row_start), min(hi, row_stop)
        out[a - row_start : b - row_start] = values[a - lo : b - lo]
    return out


def mlp(sizes: list[int], *, last_activation: bool = True) -> nn.Sequential:
    """Linear+ReLU layers through ``sizes`` (in, hidden..., out); the last ReLU only if asked."""
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DotInteraction(nn.Module):
    """DLRM's pairwise dot products of [bottom output, embeddings] (upper triangle), next to the bottom output."""

    def __init__(self, num_features: int):
        super().__init__()
        rows, cols = torch.triu_indices(num_features, num_features, offset=1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)

    def forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        features = torch.cat([dense.unsqueeze(1), embedded], dim=1)
        dots = torch.bmm(features, features.transpose(1, 2))
        return torch.cat([dense, dots[:, self.rows, self.cols]], dim=1)

    @staticmethod
    def out_features(dim: int, num_tables: int) -> int:
        n = num_tables + 1
        return dim + n * (n - 1) // 2


class LowRankCrossNet(nn.Module):
    """DCNv2's cross layers with low-rank weights: x_{l+1} = x_0 * (V_l(U_l x_l) + b_l) + x_l."""

    def __init__(self, width: int, layers: int, rank: int):
        super().__init__()
        self.down = nn.ModuleList(nn.Linear(width, rank, bias=False) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(rank, width) for _ in range(layers))

    def forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        x0 = torch.cat([dense, embedded.flatten(1)], dim=1)
        x = x0
        for down, up in zip(self.down, self.up, strict=True):
            x = x0 * up(down(x)) + x
        return x


class PlainEmbeddingBags(nn.Module):
    """One ``nn.EmbeddingBag`` (sum) per table, as the original DLRM: the single-device path."""

    def __init__(self, names: list[str], num_embeddings: list[int], dim: int, hotness: list[int], seed: int):
        super().__init__()
        self.names, self.hotness = list(names), list(hotness)
        # Under ``ebc``, as TorchRec's collection: both paths' weights are sparse.ebc.embedding_bags.<t>.weight.
        self.ebc = nn.Module()
        self.ebc.embedding_bags = nn.ModuleDict(
            (name, nn.EmbeddingBag(rows, dim, mode="sum"))
            for name, rows in zip(names, num_embeddings, strict=True)
        )
        with torch.no_grad():
            for t, (name, rows) in enumerate(zip(names, num_embeddings, strict=True)):
                self.ebc.embedding_bags[name].weight.copy_(table_rows_init(rows, dim, t, seed, 0, rows))

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        pooled, start = [], 0
        for name, hot in zip(self.names, self.hotness, strict=True):
            indices = sparse[:, start : start + hot]
            bag = self.ebc.embedding_bags[name]
            if torch.onnx.is_in_onnx_export():
                # EmbeddingBag has no ONNX form for 2-D input: the same sum as a gather.
                pooled.append(bag.weight[indices].sum(1))
            else:
                pooled.append(bag(indices))
            start += hot
        return torch.stack(pooled, dim=1)


class DLRM(nn.Module):
    """``forward(dense, sparse) -> logits [B]``; ``sparse`` is an embedding module mapping the
    int64 [B, sum(hotness)] indices (or a KeyedJaggedTensor) to [B, tables, dim]."""

    def __init__(self, sparse: nn.Module, *, num_dense: int, num_tables: int, dim: int, cfg: dict):
        super().__init__()
        bottom = list(cfg["bottom_mlp"])
        if bottom[-1] != dim:
            raise SystemExit(f"error: model.bottom_mlp must end in embedding_dim {dim}, not {bottom[-1]}")
        self.sparse = sparse
        self.bottom = mlp([num_dense, *bottom])
        kind = cfg.get("interaction", "dot")
        if kind == "dot":
            self.interaction = DotInteraction(num_tables + 1)
            width = DotInteraction.out_features(dim, num_tables)
        elif kind == "dcnv2":
            width = dim * (num_tables + 1)
            self.interaction = LowRankCrossNet(width, int(cfg["cross_layers"]), int(cfg["cross_rank"]))
        else:
            raise SystemExit(f"error: model.interaction must be dot or dcnv2, not {kind!r}")
        self.top = mlp([width, *cfg["top_mlp"], 1], last_activation=False)

    def forward(self, dense: torch.Tensor, sparse) -> torch.Tensor:
        embedded = self.sparse(sparse)
        bottom = self.bottom(dense)
        return self.top(self.interaction(bottom, embedded.to(bottom.dtype))).squeeze(1)


class CTRModel(nn.Module):
    """The inference model (export, Triton): click probabilities [B, 1] from dense and sparse."""

    def __init__(self, model: DLRM):
        super().__init__()
        self.model = model

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(dense, sparse)).unsqueeze(1)


def table_names(num_tables: int) -> list[str]:
    return [f"t{i}" for i in range(num_tables)]


def hotness_of(cfg: dict, num_tables: int) -> list[int]:
    """``model.hotness``: one int for every table or a list of one per table."""
    hot = cfg.get("hotness", 1)
    hot = [int(hot)] * num_tables if isinstance(hot, int) else [int(h) for h in hot]
    if len(hot) != num_tables or min(hot) < 1:
        raise SystemExit(f"error: model.hotness needs {num_tables} values >= 1, got {hot}")
    return hot


def table_sizes(cfg: dict, data_rows: list[int]) -> list[int]:
    """Rows per table: the dataset's, capped at ``model.max_rows`` (indices are hashed modulo it)."""
    cap = cfg.get("max_rows")
    return [min(rows, int(cap)) if cap else rows for rows in data_rows]


def build_plain(cfg: dict, data_rows: list[int], num_dense: int, seed: int) -> DLRM:
    """The single-device DLRM (``model.embeddings: plain``)."""
    rows = table_sizes(cfg, data_rows)
    names = table_names(len(rows))
    dim = int(cfg["embedding_dim"])
    sparse = PlainEmbeddingBags(names, rows, dim, hotness_of(cfg, len(rows)), seed)
    torch.manual_seed(seed)
    return DLRM(sparse, num_dense=num_dense, num_tables=len(rows), dim=dim, cfg=cfg)
