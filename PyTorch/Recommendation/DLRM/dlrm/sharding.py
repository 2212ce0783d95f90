"""The TorchRec path: an EmbeddingBagCollection sharded by DistributedModelParallel (its planner,
or types pinned by the recipe), fused sparse optimizers, the dense part in DDP, and sharded
checkpoints through torch.distributed.checkpoint."""

from __future__ import annotations

import torch
from torch import nn
from zoo.errors import UserError

from dlrm.model import DLRM, hotness_of, table_names, table_rows_init, table_sizes

DEFAULT_SHARDING_TYPES = ["table_wise", "row_wise", "column_wise"]


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class TorchRecEmbeddings(nn.Module):
    """int64 [B, sum(hotness)] -> KeyedJaggedTensor -> EmbeddingBagCollection -> [B, tables, dim].

    Each rank's loss is its local batch mean; DDP averages the dense gradients over ranks, but
    sharded tables receive every rank's gradient unaveraged, so the pooled outputs' gradients are
    divided by the world size: tables then see the global-batch mean too (same numbers as 1 process).
    """

    def __init__(self, ebc, names: list[str], hotness: list[int], dim: int, world: int):
        super().__init__()
        self.ebc = ebc
        self.names, self.hotness, self.dim, self.world = names, hotness, dim, world

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        from torchrec import KeyedJaggedTensor

        batch = sparse.shape[0]
        values, start = [], 0
        for hot in self.hotness:
            values.append(sparse[:, start : start + hot].reshape(-1))
            start += hot
        lengths = torch.tensor(self.hotness, dtype=torch.int64).repeat_interleave(batch)
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=self.names, values=torch.cat(values), lengths=lengths)
        # A sharded collection groups its output keys by sharding type: order them as the tables.
        by_table = self.ebc(kjt).to_dict()
        pooled = torch.stack([by_table[name] for name in self.names], dim=1)
        return _ScaleGrad.apply(pooled, 1.0 / self.world) if self.world > 1 else pooled


def build_torchrec(
    cfg: dict, sparse_opt: dict, data_rows: list[int], num_dense: int, seed: int, device, world: int
):
    """(DistributedModelParallel DLRM, plan text). Tables start from ``table_rows_init`` whatever
    the sharding, so a run matches the single-device model built from the same recipe and seed."""
    import torch.distributed as dist
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    from dlrm.optim import EPS, sparse_optimizer_spec

    rows = table_sizes(cfg, data_rows)
    names = table_names(len(rows))
    dim = int(cfg["embedding_dim"])
    hotness = hotness_of(cfg, len(rows))
    tables = [
        EmbeddingBagConfig(
            name=n, embedding_dim=dim, num_embeddings=r, feature_names=[n], pooling=PoolingType.SUM
        )
        for n, r in zip(names, rows, strict=True)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    torch.manual_seed(seed)
    model = DLRM(
        TorchRecEmbeddings(ebc, names, hotness, dim, world),
        num_dense=num_dense,
        num_tables=len(rows),
        dim=dim,
        cfg=cfg,
    )
    name, lr = sparse_optimizer_spec(sparse_opt)
    if name == "rowwise_adagrad":
        apply_optimizer_in_backward(RowWiseAdagrad, ebc.parameters(), {"lr": lr, "eps": EPS})
    else:
        apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": lr})

    sharding = cfg.get("sharding") or {}
    pinned = sharding.get("plan") or {}
    allowed = sharding.get("types") or DEFAULT_SHARDING_TYPES
    constraints = {
        n: ParameterConstraints(
            sharding_types=[pinned[n]] if n in pinned else list(allowed), compute_kernels=["fused"]
        )
        for n in names
    }
    unknown = set(pinned) - set(names)
    if unknown:
        raise UserError(
            f"model.sharding.plan names unknown tables {sorted(unknown)} (tables are t0..t{len(names) - 1})"
        )
    topology = Topology(world_size=world, compute_device=device.type)
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    if not dist.is_initialized():
        # DistributedModelParallel needs a process group even for one process.
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    plan = planner.collective_plan(model, [EmbeddingBagCollectionSharder()], dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=device, plan=plan)
    _init_tables(dmp, rows, dim, seed)
    return dmp, str(plan)


def _init_tables(dmp, rows: list[int], dim: int, seed: int) -> None:
    """Overwrite each local shard with its rows of ``table_rows_init``."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    state = dmp.state_dict()
    with torch.no_grad():
        for key, value in state.items():
            if not key.endswith(".weight") or ".embedding_bags." not in key:
                continue
            table = int(key.split(".embedding_bags.")[1].split(".")[0][1:])
            shards = value.local_shards() if isinstance(value, ShardedTensor) else []
            for shard in shards:
                (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                full = table_rows_init(rows[table], dim, table, seed, r0, r0 + nr)
                shard.tensor.copy_(full[:, c0 : c0 + nc])


def dense_parameters(model) -> list:
    """The parameters the dense optimizer updates (everything but the embedding tables)."""
    return [p for n, p in model.named_parameters() if "embedding_bags" not in n and p.requires_grad]
