"""Image folders (``data_dir/{train,val}/<class>/*.jpg``): the sample lists (the layout checks, which need
no framework, are in ``layout.py``), the seeded sharded sampler, the augmentation draws every backend
shares, and the ``pytorch`` backend (PIL decode in DataLoader workers).

For exact resume each sample's augmentation comes from a generator seeded by (seed, epoch, sample
index), and the sampler can start mid-epoch: the batches after a resume are the ones an unbroken run
would have seen, whatever the number of workers.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
from collections.abc import Iterator

import torch

from zoo.checkpoints import Preprocessing
from zoo.errors import one_line
from zoo.imagenet_loaders.layout import DataError, check_layout  # noqa: F401 - re-exported

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


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


def worker_message(error: BaseException) -> str:
    """The message of an error raised in a DataLoader worker: the loader re-raises it in the main
    process as "Caught DataError in DataLoader worker...Traceback...\n<module>.DataError: message"."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return re.sub(r"^[\w.]*(Error|Exception): ", "", lines[-1])


# --------------------------------------------------------------------------------------------- layout
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


# ----------------------------------------------------------------------------- pytorch (PIL) backend
class ImageFolderDataset(torch.utils.data.Dataset):
    """PIL decode + augmentation; each sample's randomness is seeded by (seed, epoch, index)."""

    def __init__(
        self,
        samples,
        image_size: int,
        train: bool,
        crop_scale=(0.08, 1.0),
        seed: int = 0,
        preprocessing=None,
        augment: str | None = None,
    ):
        from torchvision.transforms import v2 as T

        self.samples, self.image_size, self.train = samples, image_size, train
        self.crop_scale, self.seed, self.epoch = crop_scale, seed, 0
        # RandAugment (2 ops, magnitude 9) / AutoAugment (ImageNet policy) after the crop and flip
        self.augment = {None: None, "randaugment": T.RandAugment(num_ops=2, magnitude=9),
                        "autoaugment": T.AutoAugment(T.AutoAugmentPolicy.IMAGENET)}[augment]  # fmt: skip
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
            if self.augment is not None:
                # torchvision's policies draw from the global generator: seed it from this sample's
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
                    image = self.augment(image)
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
        try:
            # the loader's workers start here, in the consumer's thread
            yield from self.device_batches(iter(self.loader))
        except DataError as error:  # a worker's error comes back with the worker's traceback in its message
            raise DataError(worker_message(error)) from None

    def device_batches(self, batches):
        """(images, labels) on the device from the DataLoader's batches."""
        for batch in batches:
            images, labels = batch if self.transform is None else self.transform(*batch)
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            yield images, labels


def data_loader(dataset, sampler, cfg, collate_fn=None, pin_memory=True):
    """The torch DataLoader of a backend: ``cfg.workers`` processes, pinned batches on CUDA."""
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
        # each epoch's iterator draws its worker seed from here, not from the global generator: a
        # resumed run's global random stream (dropout, stochastic depth) stays the unbroken run's
        generator=torch.Generator().manual_seed(cfg.seed),
    )


def build_folder_loader(cfg, split: str, classes: list[str]) -> EpochLoader:
    """The ``pytorch`` backend: PIL decode and augmentation in DataLoader workers."""
    train = split == "train"
    samples = list_samples(pathlib.Path(cfg.data_dir) / split, classes)
    dataset = ImageFolderDataset(
        samples, cfg.image_size, train, cfg.crop_scale, cfg.seed, None if train else cfg.val_preprocessing,
        augment=cfg.augment if train else None,
    )  # fmt: skip
    sampler = ShardedSampler(
        len(samples), cfg.batch_size, rank=cfg.rank, world_size=cfg.world_size,
        shuffle=train, seed=cfg.seed, drop_last=train,
    )  # fmt: skip
    return EpochLoader(data_loader(dataset, sampler, cfg), sampler, dataset, cfg.device, cfg.channels_last)
