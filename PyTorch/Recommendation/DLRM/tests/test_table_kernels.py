"""The fused table's Triton kernels (``speed.table_kernels: triton``) against the torch path: the
lookup equals ``F.embedding_bag``, and after two steps the table and the row-wise Adagrad state
equal those of ``touched_rows_gradient`` + ``RowWiseAdagrad`` / SGD. Without a GPU the kernels run
in Triton's interpreter (conftest.py turns it on before triton is first imported); the full-size
case needs a GPU."""

import pytest
import torch
import torch.nn.functional as F
from dlrm.model import FusedEmbeddingBags, table_names, touched_rows_gradient
from dlrm.optim import KernelTableOptimizer, RowWiseAdagrad

ON_GPU = torch.cuda.is_available()
pytest.importorskip("triton")
from dlrm.table_kernels import bag_sum, update_touched_rows  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
ROWS, HOTNESS, DIM = [50, 50, 50], [1, 4, 2], 16


def ragged_bags(num_rows: int, lengths: list[int], seed: int):
    """(ids, offsets, bag_of_id) of bags with the given lengths (0 = empty), ids repeating."""
    gen = torch.Generator().manual_seed(seed)
    lengths_t = torch.tensor(lengths)
    ids = torch.randint(0, num_rows, (int(lengths_t.sum()),), generator=gen)
    offsets = torch.cumsum(lengths_t, 0) - lengths_t
    bag_of_id = torch.repeat_interleave(torch.arange(len(lengths)), lengths_t)
    return ids.to(DEVICE), offsets.to(DEVICE), bag_of_id.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bag_sum_equals_embedding_bag(dtype):
    lengths = [0, 3, 1, 0, 7, 2, 1, 0]  # empty bags first, in the middle and last
    ids, offsets, _ = ragged_bags(30, lengths, seed=1)
    weight = torch.randn(30, 24, generator=torch.Generator().manual_seed(0)).to(DEVICE, dtype)
    out = bag_sum(weight, ids, offsets, max(lengths))
    assert out.dtype == dtype and out.shape == (len(lengths), 24)
    assert torch.all(out[[0, 3, 7]] == 0)
    expected = F.embedding_bag(ids, weight.float(), offsets, mode="sum")
    tol = 1e-6 if dtype == torch.float32 else 2**-7
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)
    # A bag longer than one block of lookups (the block follows max_bag, here too small).
    torch.testing.assert_close(bag_sum(weight, ids, offsets, 1).float(), expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["rowwise_adagrad", "sgd"])
def test_row_update_with_empty_bags_equals_the_torch_update(name, dtype):
    """One update from ragged bags (repeated rows, empty bags) == touched_rows_gradient + the
    optimizer (a bf16 table: the float32 update of its values, rounded once)."""
    lengths = [2, 0, 5, 1, 0, 9, 3]
    ids, _, bag_of_id = ragged_bags(12, lengths, seed=2)
    gen = torch.Generator().manual_seed(3)
    init = torch.randn(12, DIM, generator=gen).to(DEVICE, dtype)
    bag_grad = torch.randn(len(lengths), DIM, generator=gen).to(DEVICE)
    rows, grad = touched_rows_gradient(bag_grad, ids, bag_of_id)
    reference = torch.nn.Parameter(init.float().clone())
    reference.grad = torch.sparse_coo_tensor(
        rows.unsqueeze(0), grad, reference.shape, is_coalesced=True, check_invariants=False
    )
    opt = (
        RowWiseAdagrad([reference], lr=0.1)
        if name == "rowwise_adagrad"
        else torch.optim.SGD([reference], lr=0.1)
    )
    opt.step()
    weight = init.clone()
    state = torch.zeros(12, device=DEVICE) if name == "rowwise_adagrad" else None
    update_touched_rows(weight, state, bag_grad, ids, bag_of_id, lr=0.1, eps=1e-8)
    assert weight.dtype == dtype
    rtol = 1e-6 if dtype == torch.float32 else 2**-7  # one bf16 step (the interpreter rounds to zero)
    torch.testing.assert_close(weight.float(), reference.detach(), atol=1e-6, rtol=rtol)
    untouched = torch.ones(12, dtype=torch.bool, device=DEVICE)
    untouched[rows] = False
    assert untouched.any() and torch.equal(weight[untouched], init[untouched])
    if state is not None:
        torch.testing.assert_close(state, opt.state[reference]["sum"], atol=1e-7, rtol=1e-6)
        assert torch.all(state[rows] > 0) and torch.all(state[untouched] == 0)


@pytest.mark.parametrize("name", ["rowwise_adagrad", "sgd"])
def test_hot_rows_longer_than_a_chunk_equal_the_torch_update(name):
    """Rows looked up 32, 33, 64 and 100 times (runs cut into chunks of UPDATE_CHUNK lookups,
    summed into one slot) next to rows looked up once."""
    from dlrm.table_kernels import UPDATE_CHUNK

    assert UPDATE_CHUNK == 32
    gen = torch.Generator().manual_seed(5)
    repeats = torch.tensor([32, 33, 1, 100, 0, 64, 1, 2])
    ids = torch.repeat_interleave(torch.arange(len(repeats)), repeats)
    ids = ids[torch.randperm(ids.numel(), generator=gen)]
    bag_of_id = torch.sort(torch.randint(0, 40, (ids.numel(),), generator=gen)).values  # empty bags too
    init = torch.randn(len(repeats), DIM, generator=gen)
    bag_grad = torch.randn(40, DIM, generator=gen)
    ids, bag_of_id, init, bag_grad = (t.to(DEVICE) for t in (ids, bag_of_id, init, bag_grad))
    rows, grad = touched_rows_gradient(bag_grad, ids, bag_of_id)
    reference = torch.nn.Parameter(init.clone())
    reference.grad = torch.sparse_coo_tensor(
        rows.unsqueeze(0), grad, reference.shape, is_coalesced=True, check_invariants=False
    )
    opt = (
        RowWiseAdagrad([reference], lr=0.1)
        if name == "rowwise_adagrad"
        else torch.optim.SGD([reference], lr=0.1)
    )
    opt.step()
    weight, state = init.clone(), torch.zeros(len(repeats), device=DEVICE)
    update_touched_rows(
        weight, state if name == "rowwise_adagrad" else None, bag_grad, ids, bag_of_id, 0.1, 1e-8
    )
    torch.testing.assert_close(weight, reference.detach(), atol=1e-6, rtol=1e-5)
    assert torch.equal(weight[4], init[4])  # never looked up
    if name == "rowwise_adagrad":
        torch.testing.assert_close(state, opt.state[reference]["sum"], atol=1e-6, rtol=1e-5)


def two_steps(kernels: bool, name: str, rows, hotness, dim, batch: int, seed: int = 0):
    """(lookups of both steps, table, Adagrad state) after two steps of a FusedEmbeddingBags."""
    tables = FusedEmbeddingBags(table_names(len(rows)), rows, dim, hotness, seed).to(DEVICE)
    if kernels:
        opt = KernelTableOptimizer(tables, name, lr=0.05)
    elif name == "rowwise_adagrad":
        opt = RowWiseAdagrad(tables.parameters(), lr=0.05)
    else:
        opt = torch.optim.SGD(tables.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(seed + 1)
    outputs = []
    for _ in range(2):
        sparse = torch.cat(
            [torch.randint(0, r, (batch, h), generator=gen) for r, h in zip(rows, hotness, strict=True)], 1
        )
        upstream = torch.randn(batch, len(rows), dim, generator=gen).to(DEVICE)
        opt.zero_grad(set_to_none=True)
        out = tables(sparse.to(DEVICE))
        (out * upstream).sum().backward()
        opt.step()
        outputs.append(out.detach())
    state = opt.state[tables.weight].get("sum") if name == "rowwise_adagrad" else None
    return outputs, tables.weight.detach(), state


@pytest.mark.parametrize("name", ["rowwise_adagrad", "sgd"])
def test_two_steps_of_the_kernels_equal_the_torch_path(name):
    """3 tables x 50 rows x 16, one-hot and multi-hot, ids repeating within and across bags."""
    ours = two_steps(True, name, ROWS, HOTNESS, DIM, batch=24)
    torch_path = two_steps(False, name, ROWS, HOTNESS, DIM, batch=24)
    for a, b in zip(ours[0], torch_path[0], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    initial = FusedEmbeddingBags(table_names(len(ROWS)), ROWS, DIM, HOTNESS, 0).weight.detach()
    assert (ours[1].cpu() - initial).abs().max() > 1e-3  # the tables moved
    torch.testing.assert_close(ours[1], torch_path[1], atol=1e-6, rtol=1e-6)
    if name == "rowwise_adagrad":
        torch.testing.assert_close(ours[2], torch_path[2], atol=1e-7, rtol=1e-6)


def test_recipe_key_selects_the_kernels_in_the_training_step():
    """TrainStep with speed.table_kernels=triton: same losses, tables and checkpointed state as torch."""
    from dlrm.benchmark import synthetic_batches
    from dlrm.step import MODEL_DIR, TrainStep
    from zoo.recipe import load_recipe

    rows = [40] * 26
    batches = synthetic_batches(2, 8, rows, [1] * 26, seed=4)
    results = {}
    for kernels in ("triton", "torch"):
        recipe = load_recipe(
            MODEL_DIR / "configs" / "dlrm_small_plain.yaml", {"speed.table_kernels": kernels}
        )
        run = TrainStep(recipe, {"num_embeddings": rows, "num_dense": 13}, torch.device(DEVICE), 0, 1)
        assert run.table_kernels == (kernels == "triton")
        losses = [float(run(*batch)) for batch in batches for _ in range(2)]
        results[kernels] = losses, run.net.sparse.weight.detach(), run.tensor_state()["sparse_optim"]
    (loss_a, table_a, state_a), (loss_b, table_b, state_b) = results["triton"], results["torch"]
    assert loss_a == pytest.approx(loss_b, abs=1e-5)
    # Four steps of the whole model: on a GPU the dense layers' and the table gradients' sums run in
    # another order in the two paths (an H200 gave one of 16,640 values 1.6e-6 apart); the four
    # updates move the touched rows by up to 0.35 here, so a missed or wrong one shows.
    torch.testing.assert_close(table_a, table_b, atol=1e-5, rtol=1e-5)
    assert state_a.keys() == state_b.keys() and len(state_a) == 26
    for t in state_a:
        torch.testing.assert_close(state_a[t]["sum"], state_b[t]["sum"], atol=1e-7, rtol=1e-5)


def test_bad_table_kernels_and_fp16_are_one_line_errors():
    from dlrm import DEFAULT_RECIPE
    from dlrm.step import check_recipe, table_kernels_of
    from zoo.errors import UserError
    from zoo.recipe import load_recipe

    with pytest.raises(UserError, match="speed.table_kernels must be torch or triton"):
        table_kernels_of({"speed": {"table_kernels": "cuda"}})
    overrides = {"run.precision": "fp16", "model.embeddings": "plain", "speed.table_kernels": "triton"}
    with pytest.raises(UserError, match="speed.table_kernels=torch"):
        check_recipe(load_recipe(DEFAULT_RECIPE, overrides))
    check_recipe(load_recipe(DEFAULT_RECIPE, {**overrides, "speed.table_kernels": "torch"}))


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU (compiled kernels at MLPerf v3's hotness)")
def test_kernels_equal_the_torch_path_at_v3_hotness_on_gpu():
    """26 tables x 20,000 rows x 128 (the last two of 50 and 3 rows: hot rows, cut into chunks),
    MLPerf v3's multi-hot sizes, batch 2048, two steps."""
    hotness = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
    rows = [20_000] * 24 + [50, 3]
    for name in ("rowwise_adagrad", "sgd"):
        ours = two_steps(True, name, rows, hotness, 128, batch=2048)
        torch_path = two_steps(False, name, rows, hotness, 128, batch=2048)
        for a, b in zip(ours[0], torch_path[0], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours[1], torch_path[1], atol=1e-5, rtol=1e-5)
        if name == "rowwise_adagrad":
            torch.testing.assert_close(ours[2], torch_path[2], atol=1e-6, rtol=1e-5)
