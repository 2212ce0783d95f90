"""The plain path's fused tables: same lookups and gradients as one nn.EmbeddingBag per table, the
per-table state-dict layout, and row-wise updates that touch only the batch's rows."""

import pytest
import torch
from dlrm.model import FusedEmbeddingBags, PerTableEmbeddingBags, table_names
from dlrm.optim import RowWiseAdagrad

ROWS = [7, 50, 3, 20]
HOTNESS = [1, 3, 2, 5]
DIM = 4


def tables(kind, seed=0, **kwargs):
    return kind(table_names(len(ROWS)), ROWS, DIM, HOTNESS, seed, **kwargs)


def batch(size=16, seed=1):
    gen = torch.Generator().manual_seed(seed)
    columns = [
        torch.randint(0, rows, (size, hot), generator=gen) for rows, hot in zip(ROWS, HOTNESS, strict=True)
    ]
    return torch.cat(columns, dim=1)


def test_fused_lookup_and_gradient_equal_per_table_bags():
    fused, per_table = tables(FusedEmbeddingBags), tables(PerTableEmbeddingBags)
    ids = batch()
    out_fused, out_per_table = fused(ids), per_table(ids)
    assert out_fused.shape == (16, len(ROWS), DIM)
    torch.testing.assert_close(out_fused, out_per_table)
    upstream = torch.randn_like(out_fused)
    (out_fused * upstream).sum().backward()
    (out_per_table * upstream).sum().backward()
    assert fused.weight.grad.is_sparse
    expected = torch.cat([bag.weight.grad for bag in per_table.ebc.embedding_bags.values()])
    torch.testing.assert_close(fused.weight.grad.to_dense(), expected)
    # Only the looked-up rows carry a gradient, each once.
    touched = torch.unique(ids + fused.column_row_start)
    assert torch.equal(fused.weight.grad._indices()[0], touched)


def test_dense_gradient_mode_equals_sparse_mode():
    sparse_mode, dense_mode = tables(FusedEmbeddingBags), tables(FusedEmbeddingBags, sparse_grad=False)
    ids = batch(seed=3)
    sparse_mode(ids).pow(2).sum().backward()
    dense_mode(ids).pow(2).sum().backward()
    assert not dense_mode.weight.grad.is_sparse
    torch.testing.assert_close(dense_mode.weight.grad, sparse_mode.weight.grad.to_dense())


def test_state_dict_is_per_table_and_loads_both_ways():
    fused, per_table = tables(FusedEmbeddingBags), tables(PerTableEmbeddingBags, seed=5)
    state = fused.state_dict()
    assert list(state) == [f"ebc.embedding_bags.t{t}.weight" for t in range(len(ROWS))]
    assert list(state) == list(per_table.state_dict())
    assert [v.shape[0] for v in state.values()] == ROWS
    # Another run's per-table weights load into the fused weight, and back.
    fused.load_state_dict(per_table.state_dict())
    ids = batch(seed=4)
    torch.testing.assert_close(fused(ids), per_table(ids))
    other = tables(PerTableEmbeddingBags, seed=9)
    other.load_state_dict(fused.state_dict())
    torch.testing.assert_close(other(ids), per_table(ids))
    # The state dict's tensors are views: writing into them (as a checkpoint load does) writes the weight.
    with torch.no_grad():
        fused.state_dict()["ebc.embedding_bags.t2.weight"].fill_(0.5)
    assert torch.all(fused.tables()[2] == 0.5) and not torch.all(fused.tables()[1] == 0.5)


@pytest.mark.parametrize("name", ["rowwise_adagrad", "sgd"])
def test_sparse_row_update_equals_the_dense_update(name):
    """Two steps of the sparse update == the dense reference update; rows no batch touched stay put."""

    def optimizer(params):
        return (
            RowWiseAdagrad(params, lr=0.1) if name == "rowwise_adagrad" else torch.optim.SGD(params, lr=0.1)
        )

    sparse_tables, dense_tables = tables(FusedEmbeddingBags), tables(FusedEmbeddingBags, sparse_grad=False)
    before = sparse_tables.weight.detach().clone()
    sparse_opt, dense_opt = optimizer([sparse_tables.weight]), optimizer([dense_tables.weight])
    touched = []
    for seed in (1, 2):
        ids = batch(size=4, seed=seed)
        touched.append(ids + sparse_tables.column_row_start)
        for module, opt in ((sparse_tables, sparse_opt), (dense_tables, dense_opt)):
            opt.zero_grad(set_to_none=True)
            (module(ids) * torch.arange(DIM)).sum().backward()
            opt.step()
    assert sparse_tables.weight.grad.is_sparse and not dense_tables.weight.grad.is_sparse
    torch.testing.assert_close(sparse_tables.weight, dense_tables.weight)
    if name == "rowwise_adagrad":
        torch.testing.assert_close(
            sparse_opt.state[sparse_tables.weight]["sum"], dense_opt.state[dense_tables.weight]["sum"]
        )
    moved = (sparse_tables.weight != before).any(1)
    touched_rows = torch.zeros(sum(ROWS), dtype=torch.bool)
    touched_rows[torch.cat([t.reshape(-1) for t in touched])] = True
    assert torch.equal(moved, touched_rows)


def test_rowwise_adagrad_on_an_accumulated_sparse_gradient_equals_the_dense_update():
    """Two backward passes before a step repeat rows in the sparse gradient: summed before the update."""
    sparse_tables, dense_tables = tables(FusedEmbeddingBags), tables(FusedEmbeddingBags, sparse_grad=False)
    for seed in (1, 2):
        ids = batch(size=8, seed=seed)
        sparse_tables(ids).sum().backward()
        dense_tables(ids).sum().backward()
    sparse_opt, dense_opt = (
        RowWiseAdagrad([sparse_tables.weight], lr=0.1),
        RowWiseAdagrad([dense_tables.weight], lr=0.1),
    )
    sparse_opt.step()
    dense_opt.step()
    torch.testing.assert_close(sparse_tables.weight, dense_tables.weight)


def test_plain_checkpoint_keeps_the_per_table_layout_and_restores_weights_and_optimizer(tmp_path):
    """TrainStep.save writes one entry per table (as before the tables were fused, and as TorchRec), no
    copy of the whole fused weight per table; TrainStep.load puts weights and row-wise state back."""
    from dlrm import DEFAULT_RECIPE
    from dlrm.step import TrainStep
    from zoo.recipe import load_recipe

    recipe = load_recipe(
        DEFAULT_RECIPE, {"model.embeddings": "plain", "model.hotness": HOTNESS, "model.embedding_dim": 8}
    )
    recipe["model"]["bottom_mlp"] = [16, 8]
    meta = {"num_embeddings": [2000] * 4, "num_dense": 13}
    run = TrainStep(recipe, meta, torch.device("cpu"), 0, 1)
    gen = torch.Generator().manual_seed(0)
    ids = torch.cat([torch.randint(0, 2000, (64, h), generator=gen) for h in HOTNESS], dim=1)
    labels, dense = torch.randint(0, 2, (64,), generator=gen).float(), torch.rand(64, 13, generator=gen)
    run(labels, dense, ids)
    run.save(tmp_path / "checkpoint", {"step": 1, "epoch": 0})
    saved_bytes = sum(p.stat().st_size for p in (tmp_path / "checkpoint").glob("*.distcp"))
    table_bytes = run.net.sparse.weight.numel() * 4
    assert table_bytes < saved_bytes < 2 * table_bytes  # each table once (not the fused storage 4 times)
    import torch.distributed.checkpoint as dcp

    keys = dcp.FileSystemReader(str(tmp_path / "checkpoint")).read_metadata().state_dict_metadata
    assert "model.sparse.ebc.embedding_bags.t3.weight" in keys and "sparse_optim.3.sum" in keys
    assert "model.sparse.weight" not in keys

    other = TrainStep({**recipe, "run": {**recipe["run"], "seed": 7}}, meta, torch.device("cpu"), 0, 1)
    assert not torch.equal(other.net.sparse.weight, run.net.sparse.weight)
    assert other.load(tmp_path / "checkpoint")["step"] == 1
    torch.testing.assert_close(other.net.sparse.weight, run.net.sparse.weight)
    state, other_state = (
        run.sparse_opt.state[run.net.sparse.weight],
        other.sparse_opt.state[other.net.sparse.weight],
    )
    assert state["sum"].count_nonzero() > 0
    torch.testing.assert_close(other_state["sum"], state["sum"])
    # The same next step from both: the restored run continues the saved one.
    torch.testing.assert_close(other(labels, dense, ids), run(labels, dense, ids))
