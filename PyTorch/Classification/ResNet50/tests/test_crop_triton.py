"""The fused crop/resize/flip/normalise kernel (resnet50.crop_triton) against the unfused path, on
the CPU through Triton's interpreter."""

import json
import os
import subprocess
import sys

import pytest
import torch

CHECK = r"""
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from resnet50.crop_triton import crop_flip_normalize
from resnet50.data import IMAGENET_MEAN, IMAGENET_STD, DataConfig, build_loader, crop_resize

g = torch.Generator().manual_seed(0)
shapes = [(37, 50), (37, 50), (64, 41), (20, 23), (64, 41), (90, 70), (12, 9)]
images = [torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8) for h, w in shapes]
images[2] = images[2].permute(1, 2, 0).contiguous().permute(2, 0, 1)  # an HWC image seen as CHW
boxes = []
for h, w in shapes:
    bw = float(torch.empty(()).uniform_(4, w, generator=g))
    bh = float(torch.empty(()).uniform_(4, h, generator=g))
    x1 = float(torch.empty(()).uniform_(0, w - bw, generator=g))
    y1 = float(torch.empty(()).uniform_(0, h - bh, generator=g))
    boxes.append([x1, y1, x1 + bw, y1 + bh])
boxes[5] = [0.0, 0.0, 70.0, 90.0]  # the whole image: 5 x 6 samples per output pixel
boxes[6] = [1.5, 2.0, 8.5, 11.0]  # smaller than the output: upscaled, one sample per pixel
boxes = torch.tensor(boxes)
flips = torch.tensor([False, True, False, True, True, False, True])
size = 16
mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255
reference = crop_resize(images, boxes, size)
reference = torch.where(flips.view(-1, 1, 1, 1), reference.flip(3), reference)
reference = (reference - mean) / std
report = {"spread": float(reference.std())}
for layout in (False, True):
    out = crop_flip_normalize(images, boxes, flips, size, mean, std, channels_last=layout)
    report[f"max_diff_cl{int(layout)}"] = float((out - reference).abs().max())
    report[f"channels_last_cl{int(layout)}"] = out.is_contiguous(memory_format=torch.channels_last)
report["unflipped_diff"] = float((out - torch.where(flips.view(-1, 1, 1, 1), reference.flip(3), reference)).abs().max())

# the loader with DataConfig(fused_crop=True) gives the batch of the unfused loader, also when the
# loader workers decode and crop half of each batch
for share, key in ((0.0, "loader"), (0.5, "host_loader")):
    batches = []
    for fused in (False, True):
        cfg = DataConfig(sys.argv[2], backend="gpu-decode", batch_size=12, image_size=12, workers=0,
                         num_classes=10, fused_crop=fused, host_decode_share=share)
        batches.append(next(iter(build_loader(cfg, "train").epoch(2))))
    report[f"{key}_diff"] = float((batches[0][0] - batches[1][0]).abs().max())
    report[f"{key}_labels_equal"] = bool(torch.equal(batches[0][1], batches[1][1]))
print(json.dumps(report))
"""


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="CPU check through Triton's interpreter; on a GPU the compiled kernel's test runs instead "
    "(the GPU image's Triton 3.6 interpreter fails inside this kernel; 3.8's runs it)",
)
def test_fused_crop_equals_roi_align_flip_and_normalise(model_dir, digits16):
    pytest.importorskip("triton")
    out = subprocess.run(
        [sys.executable, "-c", CHECK, str(model_dir), str(digits16)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["spread"] > 0.5  # the crops are not flat
    for layout in (0, 1):
        assert report[f"max_diff_cl{layout}"] < 1e-4, report
    assert not report["channels_last_cl0"] and report["channels_last_cl1"]
    assert report["unflipped_diff"] > 0.1  # the flips matter: without them the batch differs
    assert report["loader_diff"] < 1e-4 and report["loader_labels_equal"], report
    assert report["host_loader_diff"] < 1e-4 and report["host_loader_labels_equal"], report


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the compiled kernel)")
def test_fused_crop_on_gpu_equals_the_unfused_path():
    from resnet50.crop_triton import crop_flip_normalize
    from resnet50.data import IMAGENET_MEAN, IMAGENET_STD, crop_resize

    g = torch.Generator().manual_seed(1)
    shapes = [(375, 500), (500, 375), (333, 500), (375, 500)]
    images = [torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8).cuda() for h, w in shapes]
    boxes = torch.tensor(
        [
            [10.0, 20.0, 410.0, 300.0],
            [0.0, 0.0, 375.0, 500.0],
            [100.5, 50.25, 180.0, 120.0],
            [3.0, 7.0, 90.0, 50.0],
        ]
    )
    flips = torch.tensor([True, False, True, False])
    mean = torch.tensor(IMAGENET_MEAN, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device="cuda").view(1, 3, 1, 1) * 255
    reference = crop_resize(images, boxes, 224)
    reference = torch.where(flips.cuda().view(-1, 1, 1, 1), reference.flip(3), reference)
    reference = (reference - mean) / std
    out = crop_flip_normalize(images, boxes, flips, 224, mean, std, channels_last=True)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, reference, atol=1e-3, rtol=0)
