"""The DLRM network: bottom MLP, embedding bags, dot or DCNv2 interaction, top MLP.

Inputs everywhere: ``dense`` float32 [B, 13] (log-transformed counts) and ``sparse`` int64
[B, sum(hotness)]: table t's ``hotness[t]`` indices, tables in order. The embedding part is either
``FusedEmbeddingBags`` (all tables in one weight, one lookup, gradients for the touched rows only;
no fbgemm) or a TorchRec ``EmbeddingBagCollection`` (``dlrm.sharding``); both save their weights as
``sparse.ebc.embedding_bags.<table>.weight`` so that checkpoints move between them.
``PerTableEmbeddingBags`` (one ``nn.EmbeddingBag`` per table, as the original DLRM) is the reference
the fused lookup is tested and benchmarked against.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from torch import nn
from zoo.errors import UserError

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

    def draw(block: int) -> None:
        lo = block * INIT_BLOCK_ROWS
        hi = min(lo + INIT_BLOCK_ROWS, num_rows)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + table * 10_007 + block)
        a, b = max(lo, row_start), min(hi, row_stop)
        if (a, b) == (lo, hi):
            out[a - row_start : b - row_start].uniform_(-bound, bound, generator=gen)
        else:
            values = torch.empty(hi - lo, dim).uniform_(-bound, bound, generator=gen)
            out[a - row_start : b - row_start] = values[a - lo : b - lo]

    # One generator per block: blocks draw in parallel threads (a 1M-row table is 16 blocks).
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(draw, range(first, last + 1)))
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


class PerTableEmbeddingBags(nn.Module):
    """One ``nn.EmbeddingBag`` (sum) per table, as the original DLRM; ``sparse`` gives the tables
    sparse gradients (the eager baseline of ``dlrm.benchmark``)."""

    def __init__(
        self,
        names: list[str],
        num_embeddings: list[int],
        dim: int,
        hotness: list[int],
        seed: int,
        *,
        sparse: bool = False,
    ):
        super().__init__()
        self.names, self.hotness = list(names), list(hotness)
        # Under ``ebc``, as TorchRec's collection: both paths' weights are sparse.ebc.embedding_bags.<t>.weight.
        self.ebc = nn.Module()
        self.ebc.embedding_bags = nn.ModuleDict(
            (name, nn.EmbeddingBag(rows, dim, mode="sum", sparse=sparse))
            for name, rows in zip(names, num_embeddings, strict=True)
        )
        with torch.no_grad():
            for t, (name, rows) in enumerate(zip(names, num_embeddings, strict=True)):
                self.ebc.embedding_bags[name].weight.copy_(table_rows_init(rows, dim, t, seed, 0, rows))

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        pooled, start = [], 0
        for name, hot in zip(self.names, self.hotness, strict=True):
            pooled.append(self.ebc.embedding_bags[name](sparse[:, start : start + hot]))
            start += hot
        return torch.stack(pooled, dim=1)


def touched_rows_gradient(
    bag_grad: torch.Tensor, ids: torch.Tensor, bag_of_id: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the distinct rows in ``ids``, ascending; each one's gradient, summed over its lookups).

    ``bag_grad`` [bags, dim] is the gradient of the pooled bags and ``bag_of_id`` the bag of each id:
    the sum is itself an embedding-bag over ``bag_grad`` (ids sorted, one bag per distinct row), so
    no [ids, dim] tensor is ever built.
    """
    sorted_ids, order = torch.sort(ids)
    rows, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    return rows, F.embedding_bag(bag_of_id[order], bag_grad.contiguous(), starts, mode="sum")


class _FusedBagLookup(torch.autograd.Function):
    """Sum-pooled lookup whose weight gradient holds only the touched rows: a coalesced sparse
    tensor (``sparse_grad``) or a dense one with zeros elsewhere (DDP all-reduces only dense ones)."""

    @staticmethod
    def forward(ctx, weight, ids, offsets, bag_of_id, sparse_grad: bool):
        ctx.save_for_backward(ids, bag_of_id)
        ctx.weight_shape, ctx.weight_dtype, ctx.sparse_grad = weight.shape, weight.dtype, sparse_grad
        return F.embedding_bag(ids, weight, offsets, mode="sum")

    @staticmethod
    def backward(ctx, bag_grad):
        ids, bag_of_id = ctx.saved_tensors
        rows, grad = touched_rows_gradient(bag_grad.to(ctx.weight_dtype), ids, bag_of_id)
        if ctx.sparse_grad:
            weight_grad = torch.sparse_coo_tensor(
                rows.unsqueeze(0), grad, ctx.weight_shape, is_coalesced=True, check_invariants=False
            )
        else:
            weight_grad = grad.new_zeros(ctx.weight_shape).index_copy_(0, rows, grad)
        return weight_grad, None, None, None, None


class _KernelBagLookup(torch.autograd.Function):
    """Sum-pooled lookup by the Triton kernel whose backward updates the touched rows in place
    (``update_rows(bag_grad, ids, bag_of_id)``) and leaves the weight without a gradient."""

    @staticmethod
    def forward(ctx, weight, ids, offsets, bag_of_id, max_bag: int, update_rows):
        from dlrm.table_kernels import bag_sum

        ctx.save_for_backward(ids, bag_of_id)
        ctx.update_rows = update_rows
        return bag_sum(weight.detach(), ids, offsets, max_bag)

    @staticmethod
    def backward(ctx, bag_grad):
        ids, bag_of_id = ctx.saved_tensors
        ctx.update_rows(bag_grad, ids, bag_of_id)
        return None, None, None, None, None, None


class FusedEmbeddingBags(nn.Module):
    """Every table in one weight [sum(rows), dim] (table t from row ``row_starts[t]``), looked up
    with one ``embedding_bag`` (sum) per batch; the weight's gradient holds only the rows the batch
    touched (sparse with ``sparse_grad``, else dense with zeros elsewhere), so a row-wise optimizer
    updates those rows only. With ``update_in_backward`` set (``dlrm.optim.KernelTableOptimizer``
    does so), the lookup and the row updates run as Triton kernels (``dlrm.table_kernels``), the
    update inside backward. Its state dict has one tensor per table,
    ``ebc.embedding_bags.<table>.weight`` (views of the fused weight), as ``PerTableEmbeddingBags``
    and TorchRec: checkpoints move between the three, and a checkpoint loaded into the views in
    place lands in the fused weight."""

    def __init__(
        self,
        names: list[str],
        num_embeddings: list[int],
        dim: int,
        hotness: list[int],
        seed: int,
        *,
        sparse_grad: bool = True,
    ):
        super().__init__()
        self.names, self.hotness, self.rows = list(names), list(hotness), list(num_embeddings)
        self.sparse_grad = sparse_grad
        self.update_in_backward = None
        self.weight = nn.Parameter(torch.empty(sum(self.rows), dim))
        row_starts = [sum(self.rows[:t]) for t in range(len(self.rows))]
        columns_table = torch.repeat_interleave(torch.arange(len(self.rows)), torch.tensor(self.hotness))
        # Per column of ``sparse``: the row where its table starts, its table, the first column of each table.
        self.register_buffer("column_row_start", torch.tensor(row_starts)[columns_table], persistent=False)
        self.register_buffer("column_table", columns_table, persistent=False)
        self.register_buffer(
            "table_first_column",
            torch.tensor([sum(self.hotness[:t]) for t in range(len(self.rows))]),
            persistent=False,
        )
        with torch.no_grad():
            for t, table in enumerate(self.tables()):
                table.copy_(table_rows_init(self.rows[t], dim, t, seed, 0, self.rows[t]))
        self.register_state_dict_post_hook(_per_table_state)
        self.register_load_state_dict_pre_hook(_fused_state)

    def tables(self) -> tuple[torch.Tensor, ...]:
        """Each table's rows, as views of the fused weight."""
        return self.weight.split(self.rows)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        batch, width, num_tables = sparse.shape[0], sum(self.hotness), len(self.rows)
        ids = sparse + self.column_row_start
        if torch.onnx.is_in_onnx_export():
            # EmbeddingBag with offsets has no ONNX form: the same sums over a gather.
            gathered = self.weight[ids]
            return torch.stack([part.sum(1) for part in gathered.split(self.hotness, dim=1)], dim=1)
        sample = torch.arange(batch, device=sparse.device).unsqueeze(1)
        # Bag (sample, table) starts at id sample * width + the table's first column.
        offsets = (sample * width + self.table_first_column).reshape(-1)
        bag_of_id = (sample * num_tables + self.column_table).reshape(-1)
        if self.update_in_backward is not None:
            pooled = _KernelBagLookup.apply(
                self.weight, ids.reshape(-1), offsets, bag_of_id, max(self.hotness), self.update_in_backward
            )
        else:
            pooled = _FusedBagLookup.apply(self.weight, ids.reshape(-1), offsets, bag_of_id, self.sparse_grad)
        return pooled.view(batch, num_tables, -1)


def _per_table_state(module: FusedEmbeddingBags, state: dict, prefix: str, local_metadata) -> None:
    if torch.onnx.is_in_onnx_export():  # the exporter maps parameters by their state-dict entries
        return
    weight = state.pop(prefix + "weight")
    for name, table in zip(module.names, weight.split(module.rows), strict=True):
        state[f"{prefix}ebc.embedding_bags.{name}.weight"] = table


def _fused_state(module: FusedEmbeddingBags, state: dict, prefix: str, *args) -> None:
    keys = [f"{prefix}ebc.embedding_bags.{name}.weight" for name in module.names]
    if all(key in state for key in keys):
        state[prefix + "weight"] = torch.cat([state.pop(key) for key in keys])


class DLRM(nn.Module):
    """``forward(dense, sparse) -> logits [B]``; ``sparse`` is an embedding module mapping the
    int64 [B, sum(hotness)] indices (or a KeyedJaggedTensor) to [B, tables, dim]."""

    def __init__(self, sparse: nn.Module, *, num_dense: int, num_tables: int, dim: int, cfg: dict):
        super().__init__()
        bottom = list(cfg["bottom_mlp"])
        if bottom[-1] != dim:
            raise UserError(f"model.bottom_mlp must end in embedding_dim {dim}, not {bottom[-1]}")
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
            raise UserError(f"model.interaction must be dot or dcnv2, not {kind!r}")
        self.top = mlp([width, *cfg["top_mlp"], 1], last_activation=False)

    def compile_dense(self) -> None:
        """``torch.compile`` the bottom MLP, interaction and top MLP as one graph (state-dict names
        unchanged); the embedding lookup stays eager (its backward has data-dependent sizes)."""
        self.dense_forward = torch.compile(self.dense_forward)

    def forward(self, dense: torch.Tensor, sparse) -> torch.Tensor:
        return self.dense_forward(dense, self.sparse(sparse))

    def dense_forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """Logits [B] from the dense features and the pooled embeddings [B, tables, dim]."""
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
        raise UserError(f"model.hotness needs {num_tables} values >= 1, got {hot}")
    return hot


def table_sizes(cfg: dict, data_rows: list[int]) -> list[int]:
    """Rows per table: the dataset's, capped at ``model.max_rows`` (indices are hashed modulo it)."""
    cap = cfg.get("max_rows")
    return [min(rows, int(cap)) if cap else rows for rows in data_rows]


def build_plain(
    cfg: dict, data_rows: list[int], num_dense: int, seed: int, *, sparse_grad: bool = True
) -> DLRM:
    """The single-device DLRM (``model.embeddings: plain``): fused tables, their gradients sparse
    with ``sparse_grad`` (one process), else dense with zeros outside the touched rows (DDP)."""
    rows = table_sizes(cfg, data_rows)
    names = table_names(len(rows))
    dim = int(cfg["embedding_dim"])
    sparse = FusedEmbeddingBags(names, rows, dim, hotness_of(cfg, len(rows)), seed, sparse_grad=sparse_grad)
    torch.manual_seed(seed)
    return DLRM(sparse, num_dense=num_dense, num_tables=len(rows), dim=dim, cfg=cfg)
