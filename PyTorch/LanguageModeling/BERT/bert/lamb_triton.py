"""The LAMB update of a whole parameter group in two Triton kernels (``Lamb(implementation="triton")``).

Every tensor of the group is cut into chunks of ``CHUNK`` elements; one program handles one chunk
and finds its tensor through tables of base addresses, so a group of ~400 tensors costs two
launches, not a few per tensor.

- pass 1: g / clip, advance both moments in place, form u = m^ / (sqrt(v^) + eps) + wd p and write
  this chunk's partial sums of u^2 and p^2;
- pass 2: add the tensor's partial sums in a fixed order (the result does not depend on how the
  programs were scheduled), trust ratio ||p|| / ||u||, then p -= lr * ratio * u with u formed again
  from the new moments instead of being stored.

Memory traffic per step, in passes over the parameter size: gradient 2 (the global norm and pass 1),
moments 3 each, parameters 3, about 11 in all against about 21 for the fused-Adam composition; and
host work of a few launches. Needs CUDA tensors of float32.

With master weights (a bf16/fp16 model, fp32 copies in the optimizer), the kernels read the
gradients in their own dtype (bf16 straight from the backward pass, or the fp32 sums of gradient
accumulation) and pass 2 also writes the model's parameter: the model's forward needs no per-step
cast of its weights.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from zoo.torch import triton_interpreted

CHUNK = 16384
BLOCK = 1024
REDUCE_BLOCK = 1024


@triton.jit
def _chunk(chunk_tensor, chunk_start, numels, c):
    """The tensor that chunk ``c`` belongs to, the chunk's first element and the tensor's size."""
    t = tl.load(chunk_tensor + c)
    return t, tl.load(chunk_start + c), tl.load(numels + t)


@triton.jit
def _address(table, t):
    """Tensor ``t``'s base address from a table of addresses, as a float32 pointer."""
    return tl.load(table + t).to(tl.pointer_type(tl.float32))


@triton.jit
def _typed_address(table, t, dtype: tl.constexpr):
    """Tensor ``t``'s base address as a pointer to ``dtype``."""
    return tl.load(table + t).to(tl.pointer_type(dtype))


@triton.jit
def _direction(m, v, p, inv_bias1, inv_bias2_sqrt, eps, weight_decay):
    """u = m^ / (sqrt(v^) + eps) + wd p"""
    return (m * inv_bias1) / (tl.sqrt(v) * inv_bias2_sqrt + eps) + weight_decay * p


@triton.jit
def _moments_kernel(
    p_table, g_table, m_table, v_table, chunk_tensor, chunk_start, numels, clip_ptr, part_u, part_p,
    beta1, beta2, inv_bias1, inv_bias2_sqrt, eps, weight_decay,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, ADAPT: tl.constexpr, GRAD_DTYPE: tl.constexpr,
):  # fmt: skip
    c = tl.program_id(0)
    t, start, n = _chunk(chunk_tensor, chunk_start, numels, c)
    p_ptr, g_ptr = _address(p_table, t), _typed_address(g_table, t, GRAD_DTYPE)
    m_ptr, v_ptr = _address(m_table, t), _address(v_table, t)
    inv_clip = 1.0 / tl.load(clip_ptr)
    acc_u = tl.zeros([BLOCK], dtype=tl.float32)
    acc_p = tl.zeros([BLOCK], dtype=tl.float32)
    for offset in range(0, CHUNK, BLOCK):
        idx = start + offset + tl.arange(0, BLOCK)
        mask = idx < n
        g = tl.load(g_ptr + idx, mask=mask, other=0.0).to(tl.float32) * inv_clip
        m = tl.load(m_ptr + idx, mask=mask, other=0.0)
        v = tl.load(v_ptr + idx, mask=mask, other=0.0)
        m = m + (1.0 - beta1) * (g - m)
        v = beta2 * v + (1.0 - beta2) * g * g
        tl.store(m_ptr + idx, m, mask=mask)
        tl.store(v_ptr + idx, v, mask=mask)
        if ADAPT:
            p = tl.load(p_ptr + idx, mask=mask, other=0.0)
            u = _direction(m, v, p, inv_bias1, inv_bias2_sqrt, eps, weight_decay)
            acc_u += tl.where(mask, u * u, 0.0)
            acc_p += p * p
    if ADAPT:
        tl.store(part_u + c, tl.sum(acc_u, axis=0))
        tl.store(part_p + c, tl.sum(acc_p, axis=0))


@triton.jit
def _apply_kernel(
    p_table, m_table, v_table, q_table, chunk_tensor, chunk_start, numels, first_chunk, num_chunks,
    part_u, part_p, lr, inv_bias1, inv_bias2_sqrt, eps, weight_decay,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, REDUCE_BLOCK: tl.constexpr, ADAPT: tl.constexpr,
    COPY: tl.constexpr, COPY_DTYPE: tl.constexpr,
):  # fmt: skip
    c = tl.program_id(0)
    t, start, n = _chunk(chunk_tensor, chunk_start, numels, c)
    p_ptr, m_ptr, v_ptr = _address(p_table, t), _address(m_table, t), _address(v_table, t)
    scale = lr
    if ADAPT:
        first = tl.load(first_chunk + t)
        count = tl.load(num_chunks + t)
        sum_u = tl.zeros([REDUCE_BLOCK], dtype=tl.float32)
        sum_p = tl.zeros([REDUCE_BLOCK], dtype=tl.float32)
        # a while loop, not range(0, count, ...): Triton's interpreter holds scalars as 1-element
        # arrays, which numpy 2 no longer turns into a range bound; compiled, both are one scf loop
        j = 0
        while j < count:
            k = j + tl.arange(0, REDUCE_BLOCK)
            sum_u += tl.load(part_u + first + k, mask=k < count, other=0.0)
            sum_p += tl.load(part_p + first + k, mask=k < count, other=0.0)
            j += REDUCE_BLOCK
        u_norm = tl.sqrt(tl.sum(sum_u, axis=0))
        p_norm = tl.sqrt(tl.sum(sum_p, axis=0))
        ratio = tl.where((u_norm > 0) & (p_norm > 0), p_norm / u_norm, 1.0)
        scale = lr * ratio
    for offset in range(0, CHUNK, BLOCK):
        idx = start + offset + tl.arange(0, BLOCK)
        mask = idx < n
        p = tl.load(p_ptr + idx, mask=mask, other=0.0)
        m = tl.load(m_ptr + idx, mask=mask, other=0.0)
        v = tl.load(v_ptr + idx, mask=mask, other=0.0)
        u = _direction(m, v, p, inv_bias1, inv_bias2_sqrt, eps, weight_decay)
        p = p - scale * u
        tl.store(p_ptr + idx, p, mask=mask)
        if COPY:  # the model's half-precision parameter
            q_ptr = _typed_address(q_table, t, COPY_DTYPE)
            tl.store(q_ptr + idx, p.to(COPY_DTYPE, fp_downcast_rounding="rtne"), mask=mask)


TRITON_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _common_dtype(tensors: list[torch.Tensor], what: str) -> torch.dtype:
    """The one dtype of contiguous ``tensors`` (float32, bfloat16 or float16), else a ValueError."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 or not dtypes <= set(TRITON_DTYPES):
        raise ValueError(
            f"LAMB implementation 'triton' {what} all in one of float32, bfloat16, float16, "
            f"not {sorted(map(str, dtypes))}"
        )
    if not all(t.is_contiguous() for t in tensors):
        raise ValueError(f"LAMB implementation 'triton' {what} contiguous")
    return tensors[0].dtype


class GroupTables:
    """Chunk and address tables of one parameter group, built once; the gradient table is rebuilt
    only when a gradient moved (the caching allocator normally hands back the same blocks).
    ``copies``: with master weights, the model's parameters (``params`` are then the fp32
    masters). Gradients may be float32, bfloat16 or float16, all of a group in one dtype."""

    def __init__(
        self,
        params: list[torch.Tensor],
        ms: list[torch.Tensor],
        vs: list[torch.Tensor],
        copies: list[torch.Tensor] | None = None,
    ):
        on_cpu_ok = triton_interpreted()  # Triton's interpreter: tests on a CPU
        for tensor in (*params, *ms, *vs):
            if (
                not (tensor.is_cuda or on_cpu_ok)
                or tensor.dtype != torch.float32
                or not tensor.is_contiguous()
            ):
                raise ValueError("LAMB implementation 'triton' needs contiguous float32 CUDA parameters")
        self.grad_dtype = torch.float32
        self.copy_dtype = torch.float32
        if copies is not None:
            self.copy_dtype = _common_dtype(copies, "with master weights needs the group's parameters")
        device = params[0].device
        self.ids = tuple(map(id, params))
        numels = [p.numel() for p in params]
        counts = [(n + CHUNK - 1) // CHUNK for n in numels]
        chunk_tensor, chunk_start, first = [], [], []
        for i, count in enumerate(counts):
            first.append(len(chunk_tensor))
            chunk_tensor += [i] * count
            chunk_start += [k * CHUNK for k in range(count)]

        def table(values, dtype=torch.int64):
            return torch.tensor(values, dtype=dtype, device=device)

        self.n_chunks = len(chunk_tensor)
        self.chunk_tensor, self.chunk_start = table(chunk_tensor, torch.int32), table(chunk_start)
        self.numels, self.first_chunk, self.num_chunks = table(numels), table(first), table(counts)
        self.p_table = table([p.data_ptr() for p in params])
        self.m_table = table([m.data_ptr() for m in ms])
        self.v_table = table([v.data_ptr() for v in vs])
        self.q_table = table([q.data_ptr() for q in copies]) if copies is not None else self.p_table
        self.copy = copies is not None
        self.part_u = torch.empty(self.n_chunks, dtype=torch.float32, device=device)
        self.part_p = torch.empty(self.n_chunks, dtype=torch.float32, device=device)
        self.grad_ptrs: tuple[int, ...] = ()
        self.g_table = None
        self.rebuilds = 0  # gradient tables built (the benchmark reports it)
        self.keep = (params, ms, vs, copies)  # the tables hold raw addresses: keep the tensors alive

    def grad_table(self, grads: list[torch.Tensor]) -> torch.Tensor:
        ptrs = tuple(g.data_ptr() for g in grads)
        if ptrs != self.grad_ptrs or grads[0].dtype != self.grad_dtype:
            self.grad_dtype = _common_dtype(grads, "needs a group's gradients")
            # pinned + non_blocking: a plain copy from pageable memory would wait for the whole
            # backward pass queued before it, and the host would stop running ahead of the GPU
            host = torch.tensor(ptrs, dtype=torch.int64)
            if self.p_table.is_cuda:
                host = host.pin_memory()
            self.g_table = host.to(self.p_table.device, non_blocking=True)
            self.grad_ptrs = ptrs
            self.rebuilds += 1
        return self.g_table


def lamb_group_step(tables: GroupTables, grads, clip, *, lr, beta1, beta2, eps, weight_decay, adapt, step):
    """One LAMB update of the group; ``clip`` is a device scalar (1 when not clipping), ``step`` the
    1-based step count."""
    g_table = tables.grad_table(grads)
    inv_bias1 = 1.0 / (1.0 - beta1**step)
    inv_bias2_sqrt = 1.0 / (1.0 - beta2**step) ** 0.5
    grid = (tables.n_chunks,)
    _moments_kernel[grid](
        tables.p_table, g_table, tables.m_table, tables.v_table, tables.chunk_tensor, tables.chunk_start,
        tables.numels, clip, tables.part_u, tables.part_p,
        beta1, beta2, inv_bias1, inv_bias2_sqrt, eps, weight_decay,
        CHUNK=CHUNK, BLOCK=BLOCK, ADAPT=bool(adapt), GRAD_DTYPE=TRITON_DTYPES[tables.grad_dtype],
    )  # fmt: skip
    _apply_kernel[grid](
        tables.p_table, tables.m_table, tables.v_table, tables.q_table, tables.chunk_tensor, tables.chunk_start,
        tables.numels, tables.first_chunk, tables.num_chunks, tables.part_u, tables.part_p,
        lr, inv_bias1, inv_bias2_sqrt, eps, weight_decay,
        CHUNK=CHUNK, BLOCK=BLOCK, REDUCE_BLOCK=REDUCE_BLOCK, ADAPT=bool(adapt),
        COPY=tables.copy, COPY_DTYPE=TRITON_DTYPES[tables.copy_dtype],
    )  # fmt: skip
