"""Crop + resize + flip + normalise a batch of decoded images in one Triton kernel
(``DataConfig.fused_crop``).

The arithmetic is that of the unfused path in ``resnet50.data``: ``torchvision.ops.roi_align``
with ``aligned=True`` and ``sampling_ratio=-1`` on each crop box (ceil(box / size) bilinear samples
per output pixel and axis, averaged), then the horizontal flip and ``(x - 255 mean) / (255 std)``.
The unfused path converts every decoded image to float32, stacks each group of same-sized images,
runs roi_align per group, scatters the crops into the batch, flips, normalises and makes the batch
channels_last: about eight passes over the data and a dozen launches per batch. Here each program
reads the uint8 pixels it needs straight from the decoded images (through a table of their
addresses, so images of any size share one launch) and writes the normalised float32 values once,
in the output's own layout.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BLOCK = 256  # output pixels per program (all three channels)


@triton.jit
def _crop_kernel(
    table, heights, widths, strides, boxes, flips, out, mean_ptr, std_ptr,
    stride_n, stride_c, stride_h, stride_w,
    SIZE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    src = tl.load(table + n).to(tl.pointer_type(tl.uint8))
    height = tl.load(heights + n)
    width = tl.load(widths + n)
    # the image's strides (decoders may hand back channels-last views)
    sc = tl.load(strides + 3 * n)
    sy = tl.load(strides + 3 * n + 1)
    sx = tl.load(strides + 3 * n + 2)
    height_f = height.to(tl.float32)
    width_f = width.to(tl.float32)
    # roi_align(aligned=True): box corners shifted by half a pixel, no minimum size
    start_w = tl.load(boxes + 4 * n) - 0.5
    start_h = tl.load(boxes + 4 * n + 1) - 0.5
    roi_w = (tl.load(boxes + 4 * n + 2) - 0.5) - start_w
    roi_h = (tl.load(boxes + 4 * n + 3) - 0.5) - start_h
    bin_w = roi_w / SIZE
    bin_h = roi_h / SIZE
    grid_h = tl.ceil(roi_h / SIZE).to(tl.int32)
    grid_w = tl.ceil(roi_w / SIZE).to(tl.int32)
    count = tl.maximum(grid_h * grid_w, 1).to(tl.float32)
    flip = tl.load(flips + n)

    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = idx < SIZE * SIZE
    oy = idx // SIZE
    ox = idx % SIZE
    pw = tl.where(flip != 0, SIZE - 1 - ox, ox)  # the flip: output column ox shows crop column pw
    ph = oy
    acc0 = tl.zeros([BLOCK], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for iy in range(0, grid_h):
        y = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h.to(tl.float32)
        for ix in range(0, grid_w):
            x = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w.to(tl.float32)
            valid = inside & (y >= -1.0) & (y <= height_f) & (x >= -1.0) & (x <= width_f)
            yy = tl.maximum(y, 0.0)
            xx = tl.maximum(x, 0.0)
            y_low = yy.to(tl.int32)
            x_low = xx.to(tl.int32)
            y_edge = y_low >= height - 1
            x_edge = x_low >= width - 1
            y_low = tl.where(y_edge, height - 1, y_low)
            x_low = tl.where(x_edge, width - 1, x_low)
            y_high = tl.where(y_edge, height - 1, y_low + 1)
            x_high = tl.where(x_edge, width - 1, x_low + 1)
            yy = tl.where(y_edge, y_low.to(tl.float32), yy)
            xx = tl.where(x_edge, x_low.to(tl.float32), xx)
            ly = yy - y_low.to(tl.float32)
            lx = xx - x_low.to(tl.float32)
            hy = 1.0 - ly
            hx = 1.0 - lx
            w1 = hy * hx
            w2 = hy * lx
            w3 = ly * hx
            w4 = ly * lx
            o1 = y_low * sy + x_low * sx
            o2 = y_low * sy + x_high * sx
            o3 = y_high * sy + x_low * sx
            o4 = y_high * sy + x_high * sx
            acc0 += tl.where(valid, _bilinear(src, o1, o2, o3, o4, w1, w2, w3, w4, valid), 0.0)
            acc1 += tl.where(valid, _bilinear(src + sc, o1, o2, o3, o4, w1, w2, w3, w4, valid), 0.0)
            acc2 += tl.where(valid, _bilinear(src + 2 * sc, o1, o2, o3, o4, w1, w2, w3, w4, valid), 0.0)
    base = out + n * stride_n + oy * stride_h + ox * stride_w
    tl.store(base, (acc0 / count - tl.load(mean_ptr)) / tl.load(std_ptr), mask=inside)
    tl.store(base + stride_c, (acc1 / count - tl.load(mean_ptr + 1)) / tl.load(std_ptr + 1), mask=inside)
    tl.store(base + 2 * stride_c, (acc2 / count - tl.load(mean_ptr + 2)) / tl.load(std_ptr + 2), mask=inside)


@triton.jit
def _bilinear(channel, o1, o2, o3, o4, w1, w2, w3, w4, valid):
    v1 = tl.load(channel + o1, mask=valid, other=0).to(tl.float32)
    v2 = tl.load(channel + o2, mask=valid, other=0).to(tl.float32)
    v3 = tl.load(channel + o3, mask=valid, other=0).to(tl.float32)
    v4 = tl.load(channel + o4, mask=valid, other=0).to(tl.float32)
    return w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4


def crop_flip_normalize(
    images: list,
    boxes: torch.Tensor,
    flips: torch.Tensor,
    size: int,
    mean: torch.Tensor,
    std: torch.Tensor,
    channels_last: bool = False,
) -> torch.Tensor:
    """``images``: decoded uint8 [3, H, W] tensors on one device (any sizes and strides); ``boxes`` [N, 4]
    (x1, y1, x2, y2) in pixels and ``flips`` [N] (bool) on the host; ``mean``/``std``: 3 values on
    the 0-255 scale, on the device. Returns float32 [N, 3, size, size], channels_last if asked."""
    device = images[0].device
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("the fused crop kernel needs CUDA tensors (or Triton's interpreter)")
    for image in images:
        if image.dtype != torch.uint8 or image.dim() != 3 or image.shape[0] != 3:
            raise ValueError(f"expected uint8 [3, H, W] images, got {image.dtype} {tuple(image.shape)}")
    count = len(images)
    # one host tensor of the per-image values, one copy to the device (pinned on CUDA)
    table = torch.tensor([image.data_ptr() for image in images], dtype=torch.int64)
    sizes = torch.tensor([image.shape[1:] for image in images], dtype=torch.int32)
    strides = torch.tensor([image.stride() for image in images], dtype=torch.int64)
    boxes = boxes.to("cpu", torch.float32).contiguous()
    flips = flips.to("cpu", torch.int8).contiguous()
    host = (table, sizes, strides, boxes, flips)
    if device.type == "cuda":
        host = tuple(t.pin_memory().to(device, non_blocking=True) for t in host)
    table, sizes, strides, boxes, flips = host
    heights, widths = sizes[:, 0].contiguous(), sizes[:, 1].contiguous()
    out = torch.empty(count, 3, size, size, dtype=torch.float32, device=device)
    if channels_last:
        out = out.contiguous(memory_format=torch.channels_last)
    mean = mean.reshape(3).float().contiguous()
    std = std.reshape(3).float().contiguous()
    grid = (count, triton.cdiv(size * size, BLOCK))
    _crop_kernel[grid](
        table, heights, widths, strides, boxes, flips, out, mean, std, *out.stride(), SIZE=size, BLOCK=BLOCK,
    )  # fmt: skip
    # The images may be freed when this returns: the caching allocator hands their memory only to
    # later work on this stream, which runs after the kernel.
    return out
