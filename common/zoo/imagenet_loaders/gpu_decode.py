"""The ``gpu-decode`` backend: DataLoader workers read the JPEG bytes and headers and draw each sample's
crop box and flip (the same draws as the ``pytorch`` backend); ``torchvision.io.decode_jpeg`` decodes
the whole batch on the device (nvJPEG on CUDA), ``roi_align`` crops and resizes, flip and
normalisation follow there. On CUDA a background thread prepares the next batches on a stream of its
own. Also runs on the CPU (tests).
"""

from __future__ import annotations

import pathlib

import torch

from zoo.errors import one_line
from zoo.imagenet_loaders.folder import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DataError,
    EpochLoader,
    ShardedSampler,
    data_loader,
    list_samples,
    random_resized_crop_box,
    sample_generator,
    val_resize_size,
)


def crop_box(height: int, width: int, image_size: int, train: bool, crop_scale, generator):
    """(x1, y1, x2, y2) of the region that becomes the ``image_size`` square, and the flip draw.

    Training: the random-resized-crop box (the same draws as the ``pytorch`` backend). Validation:
    the region that the short-side resize + centre crop keeps, in source pixels.
    """
    if train:
        top, left, h, w = random_resized_crop_box(height, width, crop_scale, generator=generator)
        flip = float(torch.rand(1, generator=generator)) < 0.5
        return (left, top, left + w, top + h), flip
    # torchvision's Resize(short) then CenterCrop(size), mapped back to source pixels
    short = val_resize_size(image_size)
    if height <= width:
        resized_h, resized_w = short, int(short * width / height)
    else:
        resized_h, resized_w = int(short * height / width), short
    top, left = int(round((resized_h - image_size) / 2)), int(round((resized_w - image_size) / 2))
    sy, sx = height / resized_h, width / resized_w
    return (left * sx, top * sy, (left + image_size) * sx, (top + image_size) * sy), False


class JpegBytesDataset(torch.utils.data.Dataset):
    """Workers read the encoded bytes and the JPEG header only; decoding happens batched on the device.

    Each item also carries its crop box and flip, drawn from the per-sample generator: the
    augmentation parameters cost the main process nothing.
    """

    def __init__(self, samples, image_size: int, train: bool, crop_scale=(0.08, 1.0), seed: int = 0):
        self.samples, self.image_size, self.train = samples, image_size, train
        self.crop_scale, self.seed, self.epoch = crop_scale, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        import io

        from PIL import Image, UnidentifiedImageError

        path, label = self.samples[index]
        with open(path, "rb") as f:
            data = f.read()
        try:
            with Image.open(io.BytesIO(data)) as image:  # the header only: no pixels decoded here
                width, height = image.size
                kind = image.format
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
            raise DataError(f"corrupt or unreadable image {path}: {one_line(e)}") from None
        if kind != "JPEG":
            raise DataError(f"{path} is {kind}, not JPEG: --data-backend gpu-decode reads JPEG only")
        generator = sample_generator(self.seed, self.epoch, index) if self.train else None
        box, flip = crop_box(height, width, self.image_size, self.train, self.crop_scale, generator)
        return data, label, index, box, flip


class EncodedBatchCollate:
    """Collates ``JpegBytesDataset`` items into one batch for ``DeviceDecoder``: the encoded bytes as one
    flat uint8 tensor (one shared-memory block per batch, not one per image) with their offsets, and
    the labels, indices, crop boxes and flips."""

    def __call__(self, batch):
        import numpy as np

        data, labels, indices, boxes, flips = zip(*batch, strict=True)
        offsets = torch.zeros(len(data) + 1, dtype=torch.int64)
        offsets[1:] = torch.tensor([len(d) for d in data], dtype=torch.int64).cumsum(0)
        flat = torch.from_numpy(np.frombuffer(b"".join(data), dtype=np.uint8).copy())
        return (
            flat, offsets, torch.tensor(labels), torch.tensor(indices),
            torch.tensor(boxes, dtype=torch.float32), torch.tensor(flips, dtype=torch.bool),
        )  # fmt: skip


def crop_resize(images: list, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Cut each box out of its image and resize it to ``size`` x ``size``: float32 [N, 3, size, size].

    ``torchvision.ops.roi_align`` does the crop and the resize of a whole group of same-sized
    images in one kernel; its adaptive sampling (ceil(box / size) points per output pixel and
    axis, averaged) low-pass filters downscaled crops as an antialiased resize does. Images are
    grouped by size so that each group is one exact-size tensor (edges clamp to the image, never to
    padding).
    """
    from torchvision.ops import roi_align

    device = images[0].device
    groups: dict[tuple[int, int], list[int]] = {}
    for i, image in enumerate(images):
        groups.setdefault(tuple(image.shape[1:]), []).append(i)
    out = torch.empty(len(images), 3, size, size, dtype=torch.float32, device=device)
    # Index and box tables of every group built on the host and sent in one copy each.
    order = torch.tensor([i for members in groups.values() for i in members])
    local = torch.cat([torch.arange(len(members)) for members in groups.values()]).float()
    rois = host_to_device(torch.cat([local[:, None], boxes.cpu()[order]], 1), device)
    order = host_to_device(order, device)
    start = 0
    for members in groups.values():
        end = start + len(members)
        stacked = torch.stack([images[i] for i in members]).float()
        crops = roi_align(
            stacked, rois[start:end], output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True
        )
        out.index_copy_(0, order[start:end], crops)
        start = end
    return out


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a small host tensor to ``device`` through pinned memory, so that the copy is queued on
    the stream like a kernel (CUDA makes the host wait for a copy from pageable memory)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


class DeviceDecoder:
    """Decode a batch with ``torchvision.io.decode_jpeg(device=...)`` (nvJPEG, the hardware JPEG
    engine where the GPU has one), then crop + resize, flip and normalise there."""

    def __init__(self, samples, image_size, device):
        self.samples, self.image_size, self.device = samples, image_size, torch.device(device)
        self.mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1) * 255

    def decode(self, data: list, indices: torch.Tensor) -> list:
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            return decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:
            # Find the culprit one by one, to name it.
            for encoded, index in zip(data, indices.tolist(), strict=True):
                try:
                    decode_jpeg(encoded, mode=ImageReadMode.RGB, device=self.device)
                except RuntimeError as e:
                    path = self.samples[index][0]
                    raise DataError(f"corrupt or unreadable JPEG {path}: {one_line(e)}") from None
            raise

    def __call__(self, flat, offsets, labels, indices, boxes, flips):
        bounds = offsets.tolist()
        data = [flat[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        batch = crop_resize(self.decode(data, indices), boxes, self.image_size)
        if bool(flips.any()):
            flip = host_to_device(flips, batch.device).view(-1, 1, 1, 1)
            batch = torch.where(flip, batch.flip(3), batch)
        return (batch - self.mean) / self.std, labels


class DevicePrefetcher:
    """Runs ``transform`` on the next batches in a background thread and its own CUDA stream, so
    that decoding overlaps the training step; hands them over in order, with the stream ordering
    that makes them safe to use on the consumer's stream. The stream has the highest priority, so
    the crop kernels are not queued behind the training step's (PERF.md: +3-8%, half the wait)."""

    def __init__(
        self, iterable, transform, device: torch.device, depth: int = 2, channels_last: bool = False
    ):
        import queue
        import threading

        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stream = torch.cuda.Stream(device, priority=torch.cuda.Stream.priority_range()[1])
        self.device, self.channels_last = device, channels_last
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(iterable, transform), daemon=True)
        self.thread.start()

    def _run(self, iterable, transform) -> None:
        try:
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                for raw in iterable:
                    if self.stop.is_set():
                        return
                    images, labels = transform(*raw)
                    if self.channels_last:
                        images = images.contiguous(memory_format=torch.channels_last)
                    labels = host_to_device(labels, self.device)
                    event = torch.cuda.Event()
                    event.record(self.stream)
                    self._put(("batch", images, labels, event))
            self._put(("end", None, None, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(("error", e, None, None))

    def _put(self, item) -> None:
        import queue

        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self):
        try:
            while True:
                kind, images, labels, event = self.queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise images
                stream = torch.cuda.current_stream(self.device)
                stream.wait_event(event)
                images.record_stream(stream)
                labels.record_stream(stream)
                yield images, labels
        finally:
            self.stop.set()
            self.thread.join(timeout=10)


class GpuDecodeLoader(EpochLoader):
    """EpochLoader whose batches are decoded on the device, two batches ahead on CUDA."""

    def device_batches(self, batches):
        if self.device.type != "cuda":
            return super().device_batches(batches)
        return iter(DevicePrefetcher(batches, self.transform, self.device, channels_last=self.channels_last))


def build_gpu_decode_loader(cfg, split: str, classes: list[str]) -> EpochLoader:
    """The ``gpu-decode`` backend: workers read JPEG bytes, the device decodes and augments."""
    train = split == "train"
    samples = list_samples(pathlib.Path(cfg.data_dir) / split, classes)
    dataset = JpegBytesDataset(samples, cfg.image_size, train, cfg.crop_scale, cfg.seed)
    sampler = ShardedSampler(
        len(samples), cfg.batch_size, rank=cfg.rank, world_size=cfg.world_size,
        shuffle=train, seed=cfg.seed, drop_last=train,
    )  # fmt: skip
    decoder = DeviceDecoder(samples, cfg.image_size, cfg.device)
    # nvJPEG reads the encoded bytes from host memory: pinned (by the loader's pin-memory thread),
    # its uploads do not block the decoding thread (PERF.md: 9.6 -> 2.3 ms a step of host time).
    loader = data_loader(dataset, sampler, cfg, collate_fn=EncodedBatchCollate())
    return GpuDecodeLoader(loader, sampler, dataset, cfg.device, cfg.channels_last, transform=decoder)
