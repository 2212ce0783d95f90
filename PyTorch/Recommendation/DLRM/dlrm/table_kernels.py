"""Triton kernels of the fused table (``speed.table_kernels: triton``): the sum-pooled lookup, and
the backward that sums each touched row's bag gradients and applies SGD or row-wise Adagrad to
that row in place in the same kernel.

Same numbers as the torch path (``F.embedding_bag``, ``touched_rows_gradient`` and
``RowWiseAdagrad`` / ``torch.optim.SGD``) up to the order of float sums. The backward needs no
host sync: the ids are sorted, run starts (one run per distinct row) found with a comparison and a
cumsum into worst-case [lookups] buffers, and programs for as many runs as lookups skip those past
the last. A row looked up at most UPDATE_CHUNK times is summed and updated by one program (no
atomics); a hotter row's lookups are cut into chunks summed by several programs into one float32
slot (atomic adds), which a second kernel applies. Kernels run on CUDA tensors, or on any device
under Triton's interpreter (``TRITON_INTERPRET=1``, set before this module is imported).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from zoo.torch import triton_interpreted

# Lookups a lookup program gathers at once (at most). Rows (chunks) an update program takes over its
# warps: two a warp keep two rows' dependent loads in flight (the kernel waits on latency).
LOOKUP_BLOCK = 16
UPDATE_RUNS = 8
UPDATE_WARPS = 4
# Lookups of one row an update program sums at most; a longer run's chunks add into one slot.
UPDATE_CHUNK = 32
# Triton decides at import whether the kernels below are interpreted (they then also take CPU tensors)
INTERPRETED = triton_interpreted()


def runs_kernels(tensor: torch.Tensor) -> bool:
    """Whether the kernels can run on ``tensor``'s device (CUDA, or anywhere when interpreted)."""
    return tensor.is_cuda or INTERPRETED


@triton.jit
def _bag_sum_kernel(
    weight_ptr,
    ids_ptr,
    offsets_ptr,
    out_ptr,
    num_bags,
    num_ids,
    D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bag = tl.program_id(0)
    dims = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    dim_mask = dims < D
    start = tl.load(offsets_ptr + bag).to(tl.int32)
    has_next = bag + 1 < num_bags
    end = tl.where(has_next, tl.load(offsets_ptr + bag + 1, mask=has_next, other=0).to(tl.int32), num_ids)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for first in range(start, end, BLOCK_L):
        pos = first + tl.arange(0, BLOCK_L)
        pos_mask = pos < end
        rows = tl.load(ids_ptr + pos, mask=pos_mask, other=0).to(tl.int64)
        tile = tl.load(
            weight_ptr + rows[:, None] * D + dims[None, :],
            mask=pos_mask[:, None] & dim_mask[None, :],
            other=0.0,
        )
        acc += tl.sum(tile.to(tl.float32), axis=0)
    tl.store(out_ptr + bag.to(tl.int64) * D + dims, acc.to(out_ptr.dtype.element_ty), mask=dim_mask)


@triton.jit
def _update_rows(
    weight_ptr,
    state_ptr,
    row,
    grad,
    valid,
    lr,
    eps,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    RUNS: tl.constexpr,
    ADAGRAD: tl.constexpr,
):
    """SGD or row-wise Adagrad of rows ``row`` [RUNS] (where ``valid``) with gradients [RUNS, BLOCK_D]."""
    dims = tl.arange(0, BLOCK_D)
    row_mask = valid[:, None] & (dims < D)[None, :]
    weight = tl.load(weight_ptr + row[:, None] * D + dims[None, :], mask=row_mask, other=0.0)
    if ADAGRAD:
        # RowWiseAdagrad: state += mean(g^2); w += g * (-lr / (sqrt(state) + eps)).
        mean_square = tl.div_rn(tl.sum(grad * grad, axis=1), tl.full([RUNS], D, tl.float32))
        state = tl.load(state_ptr + row, mask=valid, other=0.0) + mean_square
        tl.store(state_ptr + row, state, mask=valid)
        scale = -lr * tl.div_rn(tl.full([RUNS], 1.0, tl.float32), tl.sqrt_rn(state) + eps)
    else:
        scale = tl.zeros([RUNS], dtype=tl.float32) - lr
    updated = weight.to(tl.float32) + grad * scale[:, None]
    tl.store(weight_ptr + row[:, None] * D + dims[None, :], updated.to(weight.dtype), mask=row_mask)


@triton.jit
def _chunk_update_kernel(
    weight_ptr,
    state_ptr,
    long_grad_ptr,
    bag_grad_ptr,
    sorted_ids_ptr,
    order_ptr,
    bag_of_id_ptr,
    chunk_start_ptr,
    run_of_position_ptr,
    run_length_ptr,
    long_slot_ptr,
    num_lookups,
    lr,
    eps,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    CHUNK: tl.constexpr,
    RUNS: tl.constexpr,
    ADAGRAD: tl.constexpr,
):
    # RUNS chunks a program, one [RUNS, D] tile: several rows' loads in flight at once. A chunk is
    # a whole run of at most CHUNK lookups (updated here) or CHUNK lookups of a longer run (summed
    # into that run's slot of long_grad, updated by _long_run_update_kernel).
    chunks = tl.program_id(0) * RUNS + tl.arange(0, RUNS)
    in_range = chunks < num_lookups
    start = tl.load(chunk_start_ptr + chunks, mask=in_range, other=0)
    end = tl.load(chunk_start_ptr + chunks + 1, mask=in_range, other=0)
    valid = start < end  # chunks past the last one have start == end
    length = end - start
    run = tl.load(run_of_position_ptr + start, mask=valid, other=0)
    run_length = tl.load(run_length_ptr + run, mask=valid, other=0)
    whole = valid & (run_length <= CHUNK)
    part = valid & (run_length > CHUNK)
    row = tl.load(sorted_ids_ptr + start, mask=valid, other=0).to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < D
    grad = tl.zeros([RUNS, BLOCK_D], dtype=tl.float32)
    for j in range(0, tl.max(length, axis=0)):
        pos_mask = j < length
        lookup = tl.load(order_ptr + start + j, mask=pos_mask, other=0)
        bag = tl.load(bag_of_id_ptr + lookup, mask=pos_mask, other=0).to(tl.int64)
        tile = tl.load(
            bag_grad_ptr + bag[:, None] * D + dims[None, :],
            mask=pos_mask[:, None] & dim_mask[None, :],
            other=0.0,
        )
        grad += tile.to(tl.float32)
    _update_rows(weight_ptr, state_ptr, row, grad, whole, lr, eps, D, BLOCK_D, RUNS, ADAGRAD)
    slot = tl.load(long_slot_ptr + run, mask=part, other=0).to(tl.int64)
    tl.atomic_add(
        long_grad_ptr + slot[:, None] * D + dims[None, :], grad, mask=part[:, None] & dim_mask[None, :]
    )


@triton.jit
def _long_run_update_kernel(
    weight_ptr,
    state_ptr,
    long_grad_ptr,
    sorted_ids_ptr,
    run_start_ptr,
    long_run_ptr,
    num_slots,
    num_lookups,
    lr,
    eps,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    RUNS: tl.constexpr,
    ADAGRAD: tl.constexpr,
):
    slots = tl.program_id(0) * RUNS + tl.arange(0, RUNS)
    run = tl.load(long_run_ptr + slots, mask=slots < num_slots, other=num_lookups)
    valid = run < num_lookups  # slots past the last long run hold num_lookups
    start = tl.load(run_start_ptr + run, mask=valid, other=0)
    row = tl.load(sorted_ids_ptr + start, mask=valid, other=0).to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    grad = tl.load(
        long_grad_ptr + slots.to(tl.int64)[:, None] * D + dims[None, :],
        mask=valid[:, None] & (dims < D)[None, :],
        other=0.0,
    )
    _update_rows(weight_ptr, state_ptr, row, grad, valid, lr, eps, D, BLOCK_D, RUNS, ADAGRAD)


def bag_sum(weight: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, max_bag: int) -> torch.Tensor:
    """``F.embedding_bag(ids, weight, offsets, mode="sum")``: [bags, dim] in the weight's dtype
    (float32 sums); bag b holds ids[offsets[b]:offsets[b + 1]] (an empty bag gives zeros).
    ``max_bag`` (the longest bag, or a guess) only sizes the block of lookups gathered at once."""
    num_bags, dim = offsets.numel(), weight.shape[1]
    out = torch.empty(num_bags, dim, dtype=weight.dtype, device=weight.device)
    if num_bags == 0:
        return out
    block_d = min(triton.next_power_of_2(dim), 128)
    block_l = max(2, min(triton.next_power_of_2(max(max_bag, 1)), LOOKUP_BLOCK))
    grid = (num_bags, triton.cdiv(dim, block_d))
    _bag_sum_kernel[grid](
        weight, ids, offsets, out, num_bags, ids.numel(), D=dim, BLOCK_L=block_l, BLOCK_D=block_d, num_warps=2
    )
    return out


def update_touched_rows(
    weight: torch.Tensor,
    state: torch.Tensor | None,
    bag_grad: torch.Tensor,
    ids: torch.Tensor,
    bag_of_id: torch.Tensor,
    lr: float,
    eps: float,
) -> None:
    """Apply one SGD (``state`` None) or row-wise Adagrad step (``state``: float32 [rows], one
    accumulator per row) to every row in ``ids``, in place, with the row's gradient: the sum of
    ``bag_grad[bag_of_id[i]]`` over its lookups i. No host sync."""
    count, dim = ids.numel(), weight.shape[1]
    if count == 0:
        return
    device = ids.device
    # 32-bit keys sort in half the radix passes; row ids of one device's table fit.
    keys = ids.to(torch.int32) if weight.shape[0] < 2**31 else ids
    sorted_ids, order = torch.sort(keys)
    positions = torch.arange(count, dtype=torch.int32, device=device)
    is_start = torch.ones(count, dtype=torch.bool, device=device)
    torch.ne(sorted_ids[1:], sorted_ids[:-1], out=is_start[1:])
    run_of_position = torch.cumsum(is_start, 0) - 1
    run_start = _starts(is_start, run_of_position, positions)
    run_length = run_start[1 : count + 1] - run_start[:count]  # 0 past the last run
    # Chunks: runs cut every UPDATE_CHUNK lookups, so a hot row's lookups spread over programs.
    is_chunk_start = (positions - run_start[run_of_position]) % UPDATE_CHUNK == 0
    chunk_start = _starts(is_chunk_start, torch.cumsum(is_chunk_start, 0) - 1, positions)
    # Runs longer than a chunk: a float32 gradient slot each (at most count // (chunk + 1) of them).
    is_long = run_length > UPDATE_CHUNK
    long_slot = torch.cumsum(is_long, 0) - 1
    num_slots = count // (UPDATE_CHUNK + 1) + 1
    long_run = torch.full((num_slots + 1,), count, dtype=torch.int32, device=device)
    long_run.scatter_(0, torch.where(is_long, long_slot, num_slots), positions)
    long_grad = torch.zeros(num_slots, dim, dtype=torch.float32, device=device)
    adagrad = state is not None
    state_arg = state if adagrad else weight
    block_d = triton.next_power_of_2(dim)
    _chunk_update_kernel[(triton.cdiv(count, UPDATE_RUNS),)](
        weight,
        state_arg,
        long_grad,
        bag_grad.contiguous(),
        sorted_ids,
        order,
        bag_of_id,
        chunk_start,
        run_of_position,
        run_length,
        long_slot,
        count,
        float(lr),
        float(eps),
        D=dim,
        BLOCK_D=block_d,
        CHUNK=UPDATE_CHUNK,
        RUNS=UPDATE_RUNS,
        ADAGRAD=adagrad,
        num_warps=UPDATE_WARPS,
    )
    _long_run_update_kernel[(triton.cdiv(num_slots, UPDATE_RUNS),)](
        weight,
        state_arg,
        long_grad,
        sorted_ids,
        run_start,
        long_run,
        num_slots,
        count,
        float(lr),
        float(eps),
        D=dim,
        BLOCK_D=block_d,
        RUNS=UPDATE_RUNS,
        ADAGRAD=adagrad,
        num_warps=UPDATE_WARPS,
    )


def _starts(is_start: torch.Tensor, index: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[count + 2] int32: entry k = the position of the k-th True of ``is_start`` (``index`` = its
    running count - 1), ``count`` after the last; entry count + 1 takes the other positions' writes."""
    count = is_start.numel()
    starts = torch.full((count + 2,), count, dtype=torch.int32, device=is_start.device)
    return starts.scatter_(0, torch.where(is_start, index, count + 1), positions)
