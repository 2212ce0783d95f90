"""The RPN's proposal filter with one batched NMS for every (image, level) pair, in two Triton launches.

torchvision's ``RegionProposalNetwork.filter_proposals`` runs NMS image after image (about 8,700
boxes each at 800 px: 2,000 per level over 5 levels), each a sort, an overlap-mask kernel and a
one-block walk of that mask, with host synchronisations for every output size.
:class:`BatchedNMSRegionProposalNetwork` keeps every step of that filter (per-level top-n, clipping,
small-box and score removal, greedy NMS per level with IoU > threshold suppressing, the post-NMS
top-n over levels by score) and gives the same proposals in the same order, but on fixed shapes:

1. ``_overlap_mask_kernel``: one launch; for each (image, level) pair, its boxes padded to the largest
   level's pre-NMS top-n N and sorted by score, the bit mask "box j (after i) overlaps box i";
2. ``_greedy_keep_kernel``: one launch, one program per pair, walks its mask greedily (a bit vector
   of removed boxes) and writes a keep mask of shape ``[pairs, N]``;
3. a stable score sort over the kept boxes picks the post-NMS top-n; the only host synchronisation
   is the one that splits the result into per-image tensors of their sizes.

Same arithmetic as torchvision's: the IoU is torchvision's kernel's formula in float32 (its autocast
cast), and where ``torchvision.ops.batched_nms`` separates levels by shifting boxes (few boxes per
image: ``_batched_nms_coordinate_trick``), the same shift is applied in the boxes' own dtype, since
its rounding can decide an overlap.

The kernels run on CUDA tensors, or anywhere under Triton's interpreter (``TRITON_INTERPRET=1``,
the CPU tests); otherwise, and while tracing (ONNX export), the filter is torchvision's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torchvision.models.detection.rpn import RegionProposalNetwork
from torchvision.ops import boxes as box_ops
from zoo.errors import UserError
from zoo.torch import triton_interpreted

BITS = 32  # boxes per mask word (int32 words)
# The IoU's union as nvcc compiles torchvision's devIoU (--fmad=true, its default): the column box's
# area fused into the row box's, the intersection subtracted by a second FMA. False: every product
# and sum rounded (torchvision's CPU kernel). Triton's interpreter rounds each step either way.
NVCC_FMA = True
# torchvision.ops.batched_nms shifts boxes per level at or below this many coordinates per image
# (CPU, CUDA), and runs NMS level by level on unshifted boxes above it.
COORDINATE_TRICK_MAX_NUMEL = {"cpu": 4000, "cuda": 100_000}
# Triton decides at import whether the kernels below are interpreted (they then also take CPU tensors)
INTERPRETED = triton_interpreted()


@triton.jit
def _overlap_mask_kernel(
    boxes_ptr,
    mask_ptr,
    n,
    words,
    threshold,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_WORDS: tl.constexpr,
    FUSED_UNION: tl.constexpr,
):
    """mask[pair, i, w] bit b: IoU(box i, box j = 32 w + b) > threshold and j > i (sorted boxes)."""
    pair = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    word = tl.program_id(2) * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    bit = tl.arange(0, 32)
    cols = word[:, None] * 32 + bit[None, :]
    base = boxes_ptr + pair * n * 4
    row_ok = rows < n
    col_ok = cols < n
    ax1 = tl.load(base + rows * 4 + 0, mask=row_ok, other=0.0)[:, None, None]
    ay1 = tl.load(base + rows * 4 + 1, mask=row_ok, other=0.0)[:, None, None]
    ax2 = tl.load(base + rows * 4 + 2, mask=row_ok, other=0.0)[:, None, None]
    ay2 = tl.load(base + rows * 4 + 3, mask=row_ok, other=0.0)[:, None, None]
    bx1 = tl.load(base + cols * 4 + 0, mask=col_ok, other=0.0)[None, :, :]
    by1 = tl.load(base + cols * 4 + 1, mask=col_ok, other=0.0)[None, :, :]
    bx2 = tl.load(base + cols * 4 + 2, mask=col_ok, other=0.0)[None, :, :]
    by2 = tl.load(base + cols * 4 + 3, mask=col_ok, other=0.0)[None, :, :]
    # torchvision's devIoU, term by term
    width = tl.maximum(tl.minimum(ax2, bx2) - tl.maximum(ax1, bx1), 0.0)
    height = tl.maximum(tl.minimum(ay2, by2) - tl.maximum(ay1, by1), 0.0)
    inter = width * height
    area_a = (ax2 - ax1) * (ay2 - ay1)
    if FUSED_UNION:
        union = tl.fma(-width, height, tl.fma(bx2 - bx1, by2 - by1, area_a))
    else:
        union = area_a + (bx2 - bx1) * (by2 - by1) - inter
    # IEEE division as nvcc's "/" (Triton's "/" on float32 is an approximate division)
    overlap = tl.math.div_rn(inter, union) > threshold
    overlap = overlap & (cols[None, :, :] > rows[:, None, None]) & col_ok[None, :, :]
    bits = tl.sum(overlap.to(tl.int32) << bit[None, None, :], axis=2)  # disjoint bits: sum == or
    out = mask_ptr + (pair * n + rows[:, None]) * words + word[None, :]
    tl.store(out, bits, mask=row_ok[:, None] & (word[None, :] < words))


@triton.jit
def _greedy_keep_kernel(mask_ptr, count_ptr, keep_ptr, n, words, BLOCK_WORDS: tl.constexpr):
    """keep[pair, i] = 1 where sorted box i (i < count[pair]) survives the greedy walk of the mask."""
    pair = tl.program_id(0)
    count = tl.load(count_ptr + pair)
    offs = tl.arange(0, BLOCK_WORDS)
    removed = tl.zeros([BLOCK_WORDS], dtype=tl.int32)
    for i in range(0, count):
        word = tl.sum(tl.where(offs == i // 32, removed, 0), axis=0)
        if ((word >> (i % 32)) & 1) == 0:
            tl.store(keep_ptr + pair * n + i, 1)
            row = tl.load(mask_ptr + (pair * n + i) * words + offs, mask=offs < words, other=0)
            removed = removed | row


def greedy_nms_keep(boxes: torch.Tensor, counts: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS of many independent box sets at once, with no host synchronisation.

    ``boxes``: ``[pairs, N, 4]`` float32 xyxy, each set sorted by descending score, its first
    ``counts[pair]`` rows real (the rest padding, never kept). Returns a ``[pairs, N]`` bool keep
    mask: box i is kept unless a kept box before it overlaps it with IoU > ``iou_threshold``.
    """
    pairs, n = boxes.shape[:2]
    keep = torch.zeros(pairs, n, dtype=torch.int8, device=boxes.device)
    if pairs == 0 or n == 0:
        return keep.bool()
    words = triton.cdiv(n, BITS)
    mask = torch.empty(pairs, n, words, dtype=torch.int32, device=boxes.device)
    boxes = boxes.float().contiguous()
    block_rows, block_words = 16, 2  # 1,024 IoUs a program: 8 a thread, no register spills
    grid = (pairs, triton.cdiv(n, block_rows), triton.cdiv(words, block_words))
    _overlap_mask_kernel[grid](
        boxes,
        mask,
        n,
        words,
        iou_threshold,
        BLOCK_ROWS=block_rows,
        BLOCK_WORDS=block_words,
        FUSED_UNION=NVCC_FMA,
        enable_fp_fusion=False,  # only the FMAs written above, whatever LLVM would contract
    )
    _greedy_keep_kernel[(pairs,)](
        mask,
        counts.to(torch.int32).contiguous(),
        keep,
        n,
        words,
        BLOCK_WORDS=triton.next_power_of_2(words),
        num_warps=1,
    )
    return keep.bool()


def _runs_kernels(tensor: torch.Tensor) -> bool:
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return False
    return tensor.is_cuda or INTERPRETED


class BatchedNMSRegionProposalNetwork(RegionProposalNetwork):
    """torchvision's RPN whose ``filter_proposals`` runs the batched NMS of the module docstring
    (same parameters and state dict; :func:`use_rpn_nms` switches a built model's RPN)."""

    def filter_proposals(self, proposals, objectness, image_shapes, num_anchors_per_level):
        if not _runs_kernels(proposals):
            return super().filter_proposals(proposals, objectness, image_shapes, num_anchors_per_level)
        return self._batched_filter_proposals(proposals, objectness, image_shapes, num_anchors_per_level)

    def _batched_filter_proposals(self, proposals, objectness, image_shapes, num_anchors_per_level):
        num_images, device = proposals.shape[0], proposals.device
        objectness = objectness.detach().reshape(num_images, -1)
        # torchvision's first steps, unchanged: per-level top-n, gather, sigmoid, clip
        top_n_idx = self._get_top_n_idx(objectness, num_anchors_per_level)
        batch_idx = torch.arange(num_images, device=device)[:, None]
        scores = torch.sigmoid(objectness[batch_idx, top_n_idx])
        proposals = proposals[batch_idx, top_n_idx]
        clipped = torch.stack(
            [box_ops.clip_boxes_to_image(b, s) for b, s in zip(proposals, image_shapes, strict=True)]
        )

        # Levels side by side, each padded to n slots: [images, levels * n]
        level_sizes = [min(self.pre_nms_top_n(), k) for k in num_anchors_per_level]
        levels, n = len(level_sizes), max(level_sizes)
        boxes = clipped.new_zeros(num_images, levels * n, 4)
        padded_scores = scores.new_zeros(num_images, levels * n)
        present = torch.zeros(num_images, levels * n, dtype=torch.bool, device=device)
        start = 0
        for level, k in enumerate(level_sizes):
            boxes[:, level * n : level * n + k] = clipped[:, start : start + k]
            padded_scores[:, level * n : level * n + k] = scores[:, start : start + k]
            present[:, level * n : level * n + k] = True
            start += k
        widths, heights = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
        valid = present & (widths >= self.min_size) & (heights >= self.min_size)
        valid &= padded_scores >= self.score_thresh

        nms_boxes = self._level_shifted_boxes(boxes, valid, levels, n)
        # Each (image, level): valid boxes by descending score (stable, as torchvision's NMS sorts)
        order_key = padded_scores.masked_fill(~valid, float("-inf"))
        order = order_key.view(-1, n).sort(dim=1, descending=True, stable=True).indices
        sorted_boxes = nms_boxes.view(-1, n, 4).gather(1, order[..., None].expand(-1, -1, 4))
        keep_sorted = greedy_nms_keep(sorted_boxes, valid.view(-1, n).sum(1), self.nms_thresh)
        keep = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted).view(num_images, -1)

        # Post-NMS top-n over levels: kept boxes by descending score, ties in level-major order
        post_n = self.post_nms_top_n()
        ranked = padded_scores.masked_fill(~keep, float("-inf")).sort(dim=1, descending=True, stable=True)
        top = ranked.indices[:, :post_n]
        top_boxes = boxes.gather(1, top[..., None].expand(-1, -1, 4))
        top_scores = padded_scores.gather(1, top)
        sizes = keep.sum(1).clamp(max=post_n).tolist()  # the one host synchronisation
        final_boxes = [b[:k] for b, k in zip(top_boxes, sizes, strict=True)]
        final_scores = [s[:k] for s, k in zip(top_scores, sizes, strict=True)]
        return final_boxes, final_scores

    @staticmethod
    def _level_shifted_boxes(boxes, valid, levels: int, n: int) -> torch.Tensor:
        """float32 boxes for the IoU: shifted per level exactly as ``batched_nms``'s coordinate trick
        does (in the boxes' dtype) for images with few enough boxes, unshifted for the others."""
        limit = COORDINATE_TRICK_MAX_NUMEL["cuda" if boxes.is_cuda else "cpu"]
        level_ids = torch.arange(levels, device=boxes.device).repeat_interleave(n).to(boxes)
        # Clipped boxes lie in [0, size]: the floor 0 only touches images with no box left (-inf)
        max_coordinate = boxes.masked_fill(~valid[..., None], float("-inf")).flatten(1).amax(1).clamp(min=0)
        # "+ 1" as a Python number adds in the same precision as batched_nms's one-element tensor,
        # without its host-to-device copy
        offsets = level_ids[None, :] * (max_coordinate + 1)[:, None]
        shifted = boxes + offsets[..., None]
        use_shift = (valid.sum(1) * 4 <= limit)[:, None, None]
        return torch.where(use_shift, shifted, boxes).float()


def use_rpn_nms(model, rpn_nms: str):
    """Switch ``model.rpn`` (a torchvision ``RegionProposalNetwork``) to ``rpn_nms``: "batched" or
    "torchvision"; parameters and state-dict keys are unchanged. Returns the model."""
    if rpn_nms not in ("batched", "torchvision"):  # maskrcnn.model.RPN_NMS, checked there for a recipe
        raise UserError(f"speed.rpn_nms must be batched or torchvision, got '{rpn_nms}'")
    model.rpn.__class__ = BatchedNMSRegionProposalNetwork if rpn_nms == "batched" else RegionProposalNetwork
    return model
