"""resnet50.nvjpeg: nvJPEG called on the caller's stream. The decoding itself needs a GPU."""

import io
import os

import numpy as np
import pytest
import torch
from resnet50.data import DataError, DeviceDecoder
from resnet50.nvjpeg import NvJpegDecoder, NvJpegError, library_path

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nvJPEG)")


def _jpeg(seed: int, height: int, width: int, **save) -> torch.Tensor:
    from PIL import Image

    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.BICUBIC)
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, 20, (height, width, 3))
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    if save.pop("grey", False):
        image = image.convert("L")
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **save)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def test_the_library_is_found_and_a_cpu_device_is_a_clear_error():
    assert os.path.exists(library_path()) or "/" not in library_path()
    with pytest.raises(NvJpegError, match="needs a CUDA device"):
        NvJpegDecoder("cpu")
    with pytest.raises(DataError, match="decoder must be torchvision or nvjpeg"):
        DeviceDecoder([], 224, "cpu", decoder="pil")


@needs_gpu
def test_nvjpeg_on_a_high_priority_stream_matches_decode_jpeg():
    """Baseline 4:2:0 and 4:4:4 go through nvJPEG's batched path, progressive and greyscale files
    through decode_jpeg; every image must match torchvision's GPU decode of the same bytes."""
    from torchvision.io import ImageReadMode, decode_jpeg

    files = [_jpeg(k, 375 - 7 * k, 500 - 11 * k, quality=90) for k in range(6)]
    files += [_jpeg(10, 300, 400, quality=95, subsampling=0)]  # 4:4:4
    files += [_jpeg(11, 333, 222, quality=85, progressive=True), _jpeg(12, 200, 260, grey=True)]
    files = [f.pin_memory() for f in files]
    decoder = NvJpegDecoder("cuda")
    stream = torch.cuda.Stream(priority=torch.cuda.Stream.priority_range()[1])
    with torch.cuda.stream(stream):
        # poison: the decoder's output buffers come from this block, already filled with 7s
        poison = torch.full((64 << 20,), 7, dtype=torch.uint8, device="cuda")
        del poison
        outs = [decoder.decode(files) for _ in range(4)]  # more batches than slots
    torch.cuda.current_stream().wait_stream(stream)
    reference = decode_jpeg(files, mode=ImageReadMode.RGB, device="cuda")
    for out in outs:
        assert len(out) == len(reference)
        for got, want in zip(out, reference, strict=True):
            assert got.shape == want.shape and got.dtype == torch.uint8
            diff = (got.int() - want.int()).abs()
            assert diff.float().mean() < 0.05 and diff.max() <= 2, (diff.float().mean(), diff.max())
    # a different image is far away: the comparison can fail
    assert (outs[0][0][:, :300, :400].float() - reference[6][:, :300, :400].float()).abs().mean() > 10


@needs_gpu
def test_a_corrupt_file_is_named(tmp_path):
    good = _jpeg(1, 64, 80, quality=90)
    bad = good.clone()
    bad[20:] = 0
    path = tmp_path / "broken.jpg"
    decoder = DeviceDecoder([(str(tmp_path / "ok.jpg"), 0), (str(path), 0)], 32, "cuda", decoder="nvjpeg")
    with pytest.raises(DataError, match="broken.jpg"):
        decoder.decode([good.pin_memory(), bad.pin_memory()], torch.tensor([0, 1]))
        torch.cuda.synchronize()


@needs_gpu
def test_the_loader_with_nvjpeg_gives_the_batches_of_decode_jpeg(tmp_path):
    """Through the whole gpu-decode loader (prefetch thread, high-priority stream, fused crop):
    the same samples, boxes and flips as decode_jpeg + roi_align."""
    from resnet50.benchmark import make_jpeg_set
    from resnet50.data import DataConfig, build_loader, check_layout

    make_jpeg_set(tmp_path, unique=48, samples=96, classes=4, workers=2)
    classes = check_layout(str(tmp_path))
    batches = {}
    for decoder, fused in (("torchvision", False), ("nvjpeg", True)):
        cfg = DataConfig(
            str(tmp_path), backend="gpu-decode", batch_size=32, image_size=64, workers=2, num_classes=len(classes),
            device="cuda", channels_last=True, decoder=decoder, fused_crop=fused,
        )  # fmt: skip
        loader = build_loader(cfg, "train", classes)
        batches[decoder] = [(x.float().cpu(), y.cpu()) for x, y in loader.epoch(1)]
    assert len(batches["nvjpeg"]) == len(batches["torchvision"]) == 3
    for (ours, labels), (reference, ref_labels) in zip(
        batches["nvjpeg"], batches["torchvision"], strict=True
    ):
        assert torch.equal(labels, ref_labels)
        error = float((ours - reference).abs().mean())
        assert error < 0.01, error
        assert float((ours.roll(1, 0) - reference).abs().mean()) > 10 * error
