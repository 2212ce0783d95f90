"""Input pipelines for ImageNet-style image folders: ``data_dir/{train,val}/<class>/*.jpg``.

Backends (``--data-backend``):

- ``pytorch``: torchvision ImageFolder + PIL decode in DataLoader workers, pinned memory.
- ``gpu-decode``: workers only read JPEG bytes; ``torchvision.io.decode_jpeg`` decodes the whole
  batch on the device (nvJPEG on CUDA), then crop, flip and normalise run there too. Optionally
  the workers decode and crop a share of each batch on the CPU (``host_decode_share``).
- ``dali-gpu`` / ``dali-cpu``: an NVIDIA DALI pipeline (decode on GPU via ``mixed``, or on CPU).
- ``synthetic``: random tensors created once on the device (measures the model, not the input).

Training augmentation (all backends): random-resized crop, horizontal flip, normalisation with the
ImageNet mean/std. Validation: resize the short side to ``image_size * 256 / 224``, centre crop; or,
for a registry checkpoint, the entry's preprocessing (``DataConfig.val_preprocessing``: resize, crop,
interpolation, mean, std; applied by the ``pytorch`` backend).

For exact resume the ``pytorch`` and ``gpu-decode`` backends draw each sample's augmentation from a
generator seeded by (seed, epoch, sample index), and the sampler can start mid-epoch: the batches
after a resume are the ones an unbroken run would have seen, whatever the number of workers.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from zoo.checkpoints import Preprocessing

BACKENDS = ("pytorch", "gpu-decode", "dali-gpu", "dali-cpu", "synthetic")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class DataError(Exception):
    """Bad input data (a missing folder, an unreadable image); the message is one line naming it."""


@dataclass
class DataConfig:
    data_dir: str | None
    backend: str = "pytorch"
    batch_size: int = 256  # per process
    image_size: int = 224
    workers: int = 8
    crop_scale: tuple[float, float] = (0.08, 1.0)
    num_classes: int = 1000
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    channels_last: bool = False
    prefetch: bool = True  # gpu-decode on CUDA: decode the next batches in a background thread
    decode_batch: int = 0  # gpu-decode: images per decode call (0: the whole batch in one call)
    prefetch_depth: int = 2  # gpu-decode with prefetch: batches decoded ahead
    prefetch_priority: bool = True  # gpu-decode with prefetch: crop/resize kernels on a high-priority stream
    pin_encoded: bool = True  # gpu-decode on CUDA: pin each batch's encoded bytes before nvJPEG reads them
    fused_crop: bool = False  # gpu-decode on CUDA: crop/resize/flip/normalise in one Triton kernel
    host_decode_share: float = 0.0  # gpu-decode: share of each batch the loader workers decode (PIL)
    val_preprocessing: Preprocessing | None = None  # validation resize/crop/mean/std (default: 256/224)


def val_resize_size(image_size: int) -> int:
    """Short side before the centre crop: 256 for a 224 crop, in the same ratio for other sizes."""
    return int(round(image_size * 256 / 224))


def default_preprocessing(image_size: int) -> Preprocessing:
    """Validation preprocessing of our own checkpoints: resize 256 (for 224), centre crop, bilinear."""
    return Preprocessing(val_resize_size(image_size), image_size, "bilinear", IMAGENET_MEAN, IMAGENET_STD)


def eval_transform(preprocessing: Preprocessing):
    """PIL image -> normalised float tensor [3, crop, crop]: short side to ``resize``, centre crop."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import v2 as T

    return T.Compose(
        [
            T.Resize(preprocessing.resize, InterpolationMode(preprocessing.interpolation), antialias=True),
            T.CenterCrop(preprocessing.crop),
            T.PILToTensor(),
            T.ToDtype(torch.float32, scale=True),
            T.Normalize(preprocessing.mean, preprocessing.std),
        ]
    )


def one_line(error: BaseException) -> str:
    """The last meaningful line of an exception message (DataLoader re-raises with a worker traceback)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # A DataLoader worker's error comes back as "...Traceback...\n<module>.DataError: message".
    return re.sub(r"^[\w.]*(Error|Exception): ", "", lines[-1])


# --------------------------------------------------------------------------------------------- layout
def find_classes(folder: pathlib.Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def check_layout(data_dir: str | os.PathLike | None, num_classes: int | None = None, splits=("train", "val")):
    """Check ``data_dir`` holds the split folders with the same class sub-folders; return the class names.

    Raises DataError with one line naming what is wrong.
    """
    if data_dir is None:
        raise DataError("no --data-dir given (or use --data-backend synthetic)")
    root = pathlib.Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data dir {root} does not exist")
    classes = None
    for split in splits:
        folder = root / split
        if not folder.is_dir():
            raise DataError(f"data dir {root} has no {split}/ folder (expected {root}/{split}/<class>/*.jpg)")
        found = find_classes(folder)
        if not found:
            raise DataError(f"{folder} has no class sub-folders (expected {folder}/<class>/*.jpg)")
        if classes is None:
            classes = found
        elif found != classes:
            raise DataError(
                f"{folder} has {len(found)} classes but {root / splits[0]} has {len(classes)}: "
                "class folders must match"
            )
    if num_classes is not None and len(classes) != num_classes:
        raise DataError(
            f"data dir {root} has {len(classes)} classes but the model has {num_classes} (--num-classes)"
        )
    return classes


def list_samples(folder: pathlib.Path, classes: list[str]) -> list[tuple[str, int]]:
    """(path, label) for every image under folder/<class>/, sorted, labels in class-name order."""
    samples = []
    for label, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(folder / name, followlinks=True)):
            for file in sorted(files):
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    samples.append((os.path.join(dirpath, file), label))
    if not samples:
        raise DataError(f"{folder} has no images ({', '.join(IMAGE_EXTENSIONS)})")
    return samples


# ------------------------------------------------------------------------------------------- sampling
class ShardedSampler(torch.utils.data.Sampler):
    """A seeded permutation per epoch, split across ranks, that can start at a given batch.

    Training (``drop_last``) gives every rank the same number of full batches and drops the tail;
    evaluation gives each sample to exactly one rank.
    """

    def __init__(
        self, size: int, batch_size: int, *, rank=0, world_size=1, shuffle=True, seed=0, drop_last=True
    ):
        self.size, self.batch_size, self.rank, self.world_size = size, batch_size, rank, world_size
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch, self.start_batch = 0, 0
        global_batch = batch_size * world_size
        if drop_last:
            self.batches_per_epoch = size // global_batch
            if self.batches_per_epoch == 0:
                raise DataError(
                    f"{size} training images are fewer than one global batch of {global_batch} "
                    "(batch size x processes): lower --batch-size"
                )
        else:
            self.batches_per_epoch = math.ceil(size / global_batch)

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def epoch_indices(self) -> list[int]:
        """This rank's sample indices for the current epoch, from its first batch."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        if self.drop_last:
            order = order[: self.batches_per_epoch * self.batch_size * self.world_size]
        # Evaluation keeps every sample once: the last batch of a rank may be short.
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_indices()[self.start_batch * self.batch_size :])

    def __len__(self) -> int:
        return max(0, len(self.epoch_indices()) - self.start_batch * self.batch_size)


def sample_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    """The generator for one sample's augmentation: the same draw whichever worker loads it."""
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 10_000_019 + index)


def random_resized_crop_box(height, width, scale, ratio=(3 / 4, 4 / 3), generator=None):
    """(top, left, h, w) of a random crop covering ``scale`` of the area with aspect ratio in ``ratio``.

    The same rule as torchvision's RandomResizedCrop (10 tries, then a centre crop).
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        draws = torch.rand(3, generator=generator).tolist()
        target_area = area * (scale[0] + (scale[1] - scale[0]) * draws[0])
        aspect = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * draws[1])
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,), generator=generator))
            left = int(torch.randint(0, width - w + 1, (1,), generator=generator))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


# ------------------------------------------------------------------------------------ pytorch backend
class ImageFolderDataset(torch.utils.data.Dataset):
    """PIL decode + augmentation; each sample's randomness is seeded by (seed, epoch, index)."""

    def __init__(
        self, samples, image_size: int, train: bool, crop_scale=(0.08, 1.0), seed: int = 0, preprocessing=None
    ):
        from torchvision.transforms import v2 as T

        self.samples, self.image_size, self.train = samples, image_size, train
        self.crop_scale, self.seed, self.epoch = crop_scale, seed, 0
        self.to_tensor = T.Compose([T.PILToTensor(), T.ToDtype(torch.float32, scale=True)])
        self.normalize = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
        self.val_transform = eval_transform(preprocessing or default_preprocessing(image_size))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.samples)

    def load(self, path: str):
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(path) as image:
                return image.convert("RGB")
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
            raise DataError(f"corrupt or unreadable image {path}: {one_line(e)}") from None

    def __getitem__(self, index: int):
        from torchvision.transforms.v2 import functional as F

        path, label = self.samples[index]
        image = self.load(path)
        if self.train:
            generator = sample_generator(self.seed, self.epoch, index)
            top, left, h, w = random_resized_crop_box(
                image.height, image.width, self.crop_scale, generator=generator
            )
            image = F.resized_crop(image, top, left, h, w, [self.image_size, self.image_size], antialias=True)
            if float(torch.rand(1, generator=generator)) < 0.5:
                image = F.horizontal_flip(image)
            return self.normalize(self.to_tensor(image)), label
        return self.val_transform(image), label


class EpochLoader:
    """Wraps a DataLoader: ``for images, labels in loader.epoch(e, start_batch)`` on the device."""

    def __init__(self, loader, sampler: ShardedSampler, dataset, device, channels_last=False, transform=None):
        self.loader, self.sampler, self.dataset = loader, sampler, dataset
        self.device, self.channels_last, self.transform = torch.device(device), channels_last, transform

    @property
    def batches_per_epoch(self) -> int:
        return self.sampler.batches_per_epoch

    @property
    def samples_per_epoch(self) -> int:
        """Samples per epoch over all ranks."""
        return self.batches_per_epoch * self.global_batch if self.sampler.drop_last else self.sampler.size

    @property
    def global_batch(self) -> int:
        return self.sampler.batch_size * self.sampler.world_size

    def epoch(self, epoch: int, start_batch: int = 0):
        self.sampler.set_epoch(epoch, start_batch)
        self.dataset.set_epoch(epoch)
        # the loader's workers start here, in the consumer's thread
        yield from self.device_batches(iter(self.loader))

    def device_batches(self, batches):
        """(images, labels) on the device from the DataLoader's batches."""
        for batch in batches:
            images, labels = batch if self.transform is None else self.transform(*batch)
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            yield images, labels


def _data_loader(dataset, sampler, cfg: DataConfig, collate_fn=None, pin_memory=True):
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        sampler=sampler,
        num_workers=cfg.workers,
        pin_memory=pin_memory and torch.device(cfg.device).type == "cuda",
        persistent_workers=False,
        prefetch_factor=4 if cfg.workers > 0 else None,
        collate_fn=collate_fn,
        drop_last=False,
    )


def build_pytorch_loader(cfg: DataConfig, split: str, classes: list[str]) -> EpochLoader:
    train = split == "train"
    samples = list_samples(pathlib.Path(cfg.data_dir) / split, classes)
    dataset = ImageFolderDataset(
        samples, cfg.image_size, train, cfg.crop_scale, cfg.seed, None if train else cfg.val_preprocessing
    )
    sampler = ShardedSampler(
        len(samples), cfg.batch_size, rank=cfg.rank, world_size=cfg.world_size,
        shuffle=train, seed=cfg.seed, drop_last=train,
    )  # fmt: skip
    return EpochLoader(_data_loader(dataset, sampler, cfg), sampler, dataset, cfg.device, cfg.channels_last)


# --------------------------------------------------------------------------------- gpu-decode backend
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
    """Collates ``JpegBytesDataset`` items into one batch for ``DeviceDecoder``.

    The first ``round(host_share * len(batch))`` images are decoded, cropped and resized here, in
    the loader worker (PIL, libjpeg-turbo), as the CPU half of the decode: the device's JPEG work per
    batch shrinks by that share. They travel as uint8 [k, size, size, 3]; flips and normalisation
    stay on the device for every image. The rest travel encoded, as one flat uint8 tensor (one
    shared-memory block per batch, not one per image) with their offsets. Labels, indices, boxes and
    flips cover the whole batch.
    """

    def __init__(self, samples, image_size: int, host_share: float = 0.0):
        if not 0.0 <= host_share <= 1.0:
            raise DataError(f"host decode share must be between 0 and 1, not {host_share}")
        self.samples, self.image_size, self.host_share = samples, image_size, host_share

    def __call__(self, batch):
        import numpy as np

        data, labels, indices, boxes, flips = zip(*batch, strict=True)
        host = round(self.host_share * len(batch))
        crops = [self.host_crop(data[i], boxes[i], indices[i]) for i in range(host)]
        host_crops = (
            torch.from_numpy(np.stack(crops)) if crops else torch.empty(0, 0, 0, 3, dtype=torch.uint8)
        )
        encoded = data[host:]
        offsets = torch.zeros(len(encoded) + 1, dtype=torch.int64)
        offsets[1:] = torch.tensor([len(d) for d in encoded], dtype=torch.int64).cumsum(0)
        flat = torch.from_numpy(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy())
        return (
            flat, offsets, torch.tensor(labels), torch.tensor(indices),
            torch.tensor(boxes, dtype=torch.float32), torch.tensor(flips, dtype=torch.bool), host_crops,
        )  # fmt: skip

    def host_crop(self, data: bytes, box, index: int):
        """``box`` (x1, y1, x2, y2) of one JPEG resized to size x size (bilinear, antialiased as PIL
        shrinks): uint8 [size, size, 3]."""
        import io

        import numpy as np
        from PIL import Image

        size = self.image_size
        x1, y1, x2, y2 = box
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                # libjpeg decodes at 1/2, 1/4 or 1/8 scale for free: the largest reduction that
                # still leaves the box at least size pixels on each side.
                image.draft(
                    "RGB", (math.ceil(width * size / (x2 - x1)), math.ceil(height * size / (y2 - y1)))
                )
                sx, sy = image.width / width, image.height / height
                crop = image.convert("RGB").resize(
                    (size, size), Image.BILINEAR, box=(x1 * sx, y1 * sy, x2 * sx, y2 * sy)
                )
        except (OSError, SyntaxError, ValueError) as e:
            raise DataError(f"corrupt or unreadable image {self.samples[index][0]}: {one_line(e)}") from None
        return np.asarray(crop)


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
    the stream like a kernel (CUDA makes the host wait for a copy from pageable memory). On the
    H100 runs in PERF.md this made no measurable difference; it is kept as the cheaper form."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


class DeviceDecoder:
    """Decode a batch with ``torchvision.io.decode_jpeg(device=...)`` (nvJPEG, the hardware JPEG
    engine where the GPU has one), then crop + resize, flip and normalise there."""

    def __init__(
        self,
        samples,
        image_size,
        device,
        decode_batch: int = 0,
        fused: bool = False,
        channels_last: bool = False,
    ):
        self.samples, self.image_size, self.device = samples, image_size, torch.device(device)
        self.decode_batch = decode_batch
        # fused: resnet50.crop_triton, CUDA only (Triton's interpreter too, for the tests)
        self.fused = fused and (self.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1")
        self.channels_last = channels_last
        self.mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1) * 255

    def decode(self, data: list, indices: torch.Tensor) -> list:
        step = self.decode_batch or len(data)
        images = []
        for start in range(0, len(data), step):
            images += self._decode(data[start : start + step], indices[start : start + step])
        return images

    def _decode(self, data: list, indices: torch.Tensor) -> list:
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

    def __call__(self, flat, offsets, labels, indices, boxes, flips, host_crops):
        bounds = offsets.tolist()
        data = [flat[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        done = len(host_crops)
        images = self.decode(data, indices[done:]) if data else []
        if done:
            # The workers' crops (the batch's first images) are already size x size: the box that
            # keeps the whole image reads each pixel exactly once, so they share the one crop pass.
            crops = host_to_device(host_crops, self.device).permute(0, 3, 1, 2)
            images = list(crops.unbind(0)) + images
            boxes = boxes.clone()
            boxes[:done] = torch.tensor([0.0, 0.0, self.image_size, self.image_size])
        if self.fused:
            from resnet50.crop_triton import crop_flip_normalize

            batch = crop_flip_normalize(
                images, boxes, flips, self.image_size, self.mean, self.std, self.channels_last
            )
            return batch, labels
        batch = crop_resize(images, boxes, self.image_size)
        if bool(flips.any()):
            flip = host_to_device(flips, batch.device).view(-1, 1, 1, 1)
            batch = torch.where(flip, batch.flip(3), batch)
        return (batch - self.mean) / self.std, labels


class DevicePrefetcher:
    """Runs ``transform`` on the next batches in a background thread and its own CUDA stream, so
    that decoding overlaps the training step; hands them over in order, with the stream ordering
    that makes them safe to use on the consumer's stream."""

    def __init__(
        self,
        iterable,
        transform,
        device: torch.device,
        depth: int = 2,
        channels_last: bool = False,
        high_priority: bool = True,
    ):
        import queue
        import threading

        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        priority = torch.cuda.Stream.priority_range()[1] if high_priority else 0
        self.stream = torch.cuda.Stream(device, priority=priority)
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
    """EpochLoader whose batches are decoded on the device, up to ``depth`` batches ahead on CUDA."""

    def __init__(self, *args, prefetch: bool = True, depth: int = 2, high_priority: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.prefetch = prefetch and self.device.type == "cuda"
        self.depth, self.high_priority = depth, high_priority

    def device_batches(self, batches):
        if not self.prefetch:
            return super().device_batches(batches)
        prefetcher = DevicePrefetcher(
            batches, self.transform, self.device, self.depth, self.channels_last, self.high_priority
        )
        return iter(prefetcher)


def build_gpu_decode_loader(cfg: DataConfig, split: str, classes: list[str]) -> EpochLoader:
    train = split == "train"
    samples = list_samples(pathlib.Path(cfg.data_dir) / split, classes)
    dataset = JpegBytesDataset(samples, cfg.image_size, train, cfg.crop_scale, cfg.seed)
    sampler = ShardedSampler(
        len(samples), cfg.batch_size, rank=cfg.rank, world_size=cfg.world_size,
        shuffle=train, seed=cfg.seed, drop_last=train,
    )  # fmt: skip
    decoder = DeviceDecoder(
        samples,
        cfg.image_size,
        cfg.device,
        cfg.decode_batch,
        fused=cfg.fused_crop,
        channels_last=cfg.channels_last,
    )
    # nvJPEG reads the encoded bytes from host memory. Pinning them first (pin_encoded) is one more
    # copy, in the loader's pin-memory thread, but lets nvJPEG upload them without waiting (PERF.md).
    collate = EncodedBatchCollate(samples, cfg.image_size, cfg.host_decode_share)
    loader = _data_loader(dataset, sampler, cfg, collate_fn=collate, pin_memory=cfg.pin_encoded)
    return GpuDecodeLoader(
        loader,
        sampler,
        dataset,
        cfg.device,
        cfg.channels_last,
        transform=decoder,
        prefetch=cfg.prefetch,
        depth=cfg.prefetch_depth,
        high_priority=cfg.prefetch_priority,
    )


# ------------------------------------------------------------------------------------------ synthetic
class SyntheticLoader:
    """One random batch created on the device, served ``batches_per_epoch`` times."""

    def __init__(self, cfg: DataConfig, batches_per_epoch: int = 100):
        generator = torch.Generator().manual_seed(cfg.seed)
        images = torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, generator=generator)
        labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator)
        self.images, self.labels = images.to(cfg.device), labels.to(cfg.device)
        if cfg.channels_last:
            self.images = self.images.contiguous(memory_format=torch.channels_last)
        self.batches_per_epoch = batches_per_epoch
        self.global_batch = cfg.batch_size * cfg.world_size
        self.samples_per_epoch = batches_per_epoch * self.global_batch

    def epoch(self, epoch: int, start_batch: int = 0):
        for _ in range(start_batch, self.batches_per_epoch):
            yield self.images, self.labels


# ------------------------------------------------------------------------------------------------ DALI
def import_dali():
    try:
        import nvidia.dali  # noqa: F401
        from nvidia.dali import fn, pipeline_def, types
    except ImportError:
        raise DataError(
            "NVIDIA DALI is not installed: pip install nvidia-dali-cuda120 (or use --data-backend pytorch)"
        ) from None
    return fn, pipeline_def, types


class DaliLoader:
    """A DALI pipeline (file reader -> decode -> crop/flip/normalise) behind the EpochLoader interface.

    DALI's reader shuffles with its own seeded generator; resume restarts the epoch's stream but
    does not reproduce the exact sample order of an unbroken run (the PyTorch backends do).
    """

    def __init__(self, cfg: DataConfig, split: str, classes: list[str]):
        fn, pipeline_def, types = import_dali()
        train = split == "train"
        use_gpu = cfg.backend == "dali-gpu"
        if use_gpu and not torch.cuda.is_available():
            raise DataError("--data-backend dali-gpu needs a CUDA GPU (use dali-cpu or pytorch)")
        device_id = torch.cuda.current_device() if torch.cuda.is_available() else None
        folder = str(pathlib.Path(cfg.data_dir) / split)
        samples = list_samples(pathlib.Path(folder), classes)
        files = [path for path, _ in samples]
        labels = [label for _, label in samples]
        size = cfg.image_size
        mean = [255 * m for m in IMAGENET_MEAN]
        std = [255 * s for s in IMAGENET_STD]

        @pipeline_def
        def pipeline():
            jpegs, label = fn.readers.file(
                files=files, labels=labels, random_shuffle=train, shard_id=cfg.rank,
                num_shards=cfg.world_size, pad_last_batch=not train, name="Reader", seed=cfg.seed,
            )  # fmt: skip
            decode_device = "mixed" if use_gpu else "cpu"
            if train:
                images = fn.decoders.image_random_crop(
                    jpegs, device=decode_device, output_type=types.RGB,
                    random_area=list(cfg.crop_scale), random_aspect_ratio=[3 / 4, 4 / 3],
                )  # fmt: skip
                images = fn.resize(images, resize_x=size, resize_y=size)
                mirror = fn.random.coin_flip(probability=0.5)
            else:
                images = fn.decoders.image(jpegs, device=decode_device, output_type=types.RGB)
                images = fn.resize(images, resize_shorter=val_resize_size(size))
                mirror = False
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", crop=(size, size),
                mean=mean, std=std, mirror=mirror,
            )  # fmt: skip
            if use_gpu:
                label = label.gpu()
            return images, label

        self.pipe = pipeline(
            batch_size=cfg.batch_size,
            num_threads=max(1, cfg.workers),
            device_id=device_id,
            seed=cfg.seed + cfg.rank,
        )
        self.pipe.build()
        self.train, self.size, self.device, self.channels_last = (
            train,
            len(files),
            torch.device(cfg.device),
            cfg.channels_last,
        )
        self.global_batch = cfg.batch_size * cfg.world_size
        per_shard = math.ceil(self.size / cfg.world_size)
        self.batches_per_epoch = (
            per_shard // cfg.batch_size if train else math.ceil(per_shard / cfg.batch_size)
        )
        if self.batches_per_epoch == 0:
            raise DataError(f"{self.size} images are fewer than one global batch of {self.global_batch}")
        self.samples_per_epoch = self.batches_per_epoch * self.global_batch if train else self.size

    def epoch(self, epoch: int, start_batch: int = 0):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        policy = LastBatchPolicy.DROP if self.train else LastBatchPolicy.PARTIAL
        iterator = DALIGenericIterator(
            self.pipe, ["images", "labels"], reader_name="Reader", last_batch_policy=policy, auto_reset=False
        )
        try:
            for step, batch in enumerate(iterator):
                if step >= self.batches_per_epoch:
                    break
                if step < start_batch:
                    continue
                images = batch[0]["images"].to(self.device, non_blocking=True)
                labels = batch[0]["labels"].view(-1).long().to(self.device, non_blocking=True)
                if self.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                yield images, labels
        finally:
            iterator.reset()


# -------------------------------------------------------------------------------------------- factory
def build_loader(cfg: DataConfig, split: str, classes: list[str] | None = None):
    """The loader for ``split`` ("train" or "val") with the chosen backend."""
    if cfg.backend not in BACKENDS:
        raise DataError(f"unknown data backend {cfg.backend!r}; choose one of {', '.join(BACKENDS)}")
    if cfg.backend == "synthetic":
        return SyntheticLoader(cfg, batches_per_epoch=100 if split == "train" else 10)
    if classes is None:
        classes = check_layout(cfg.data_dir, cfg.num_classes)
    pre = cfg.val_preprocessing
    if split == "val" and cfg.backend != "pytorch" and pre and pre != default_preprocessing(cfg.image_size):
        raise DataError(
            f"the checkpoint's preprocessing ({pre.describe()}) is applied by --data-backend pytorch only"
        )
    if cfg.backend == "pytorch":
        return build_pytorch_loader(cfg, split, classes)
    if cfg.backend == "gpu-decode":
        return build_gpu_decode_loader(cfg, split, classes)
    return DaliLoader(cfg, split, classes)
