"""Training patches and evaluation volumes of a prepared KiTS19 folder (or of synthetic volumes).

    cases = load_cases(data_dir)                         # {"train": {name: (image, label)}, "val": {...}}
    patches = PatchLoader(cases["train"], patch=(128,) * 3, batch_size=2, oversampling=0.4, seed=0,
                          rank=0, world_size=8, device="cuda")
    for images, labels in patches.epoch(epoch, start_step=0): ...   # [2, 1, 128^3] float, [2, 1, 128^3] uint8
    for name, image, label in volumes(cases["val"], rank, world_size, device): ...

An epoch shows every training case once over all ranks (MLPerf's epoch), ``batch_size`` cases per rank and
step, in an order drawn from (seed, epoch). Each patch is cropped on the host from the memory-mapped npy
(MLPerf's foreground oversampling: with probability ``oversampling`` the patch covers the bounding box of
one of the two largest regions of a random foreground class of the case), then flipped, scaled and noised on the device
(``augment``). Every random draw for the i-th sample of global step s of epoch e comes from generators
seeded with (seed, e, s, i): a resumed run draws the same patches as an unbroken one, and N processes of
batch B the same as one process of batch N x B.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from zoo.errors import UserError

from unet3d.kits19 import load_prepared_case, read_dataset

# MLPerf's augmentation: each axis flipped with probability 1/3; with probability 0.1 the intensities
# scaled by a factor in [0.7, 1.3]; with probability 0.1 Gaussian noise of a deviation in [0, 0.1].
FLIP_PROBABILITY = 1 / 3
BRIGHTNESS = (0.1, 0.3)  # (probability, factor range around 1)
NOISE = (0.1, 0.1)  # (probability, largest deviation)


def load_cases(data_dir, mmap: bool = True) -> dict:
    """{"train": {name: (image, label)}, "val": {...}} of a prepared folder (dataset.json's split)."""
    dataset = read_dataset(data_dir)
    return {
        split: {name: load_prepared_case(data_dir, name, mmap) for name in dataset[split]}
        for split in ("train", "val")
    }


def synthetic_split(cases: dict, val: int) -> dict:
    """The last ``val`` of ``cases`` held out for evaluation."""
    names = sorted(cases)
    if not 0 < val < len(names):
        raise UserError(f"synthetic data: {val} evaluation case(s) of {len(names)} leaves none to train on")
    return {"train": {n: cases[n] for n in names[:-val]}, "val": {n: cases[n] for n in names[-val:]}}


def foreground_boxes(label: np.ndarray) -> dict[int, list[tuple]]:
    """{class: [(low corner, high corner), ...]} of each foreground class present in ``label`` [1, D, H, W]:
    the bounding boxes of its two largest connected regions (by box volume, as MLPerf picks them: each
    kidney on its own, not one box spanning both)."""
    from scipy import ndimage

    boxes = {}
    volume = np.asarray(label[0])
    for cls in (1, 2):
        regions, count = ndimage.label(volume == cls)
        if count == 0:
            continue
        found = [box for box in ndimage.find_objects(regions) if box is not None]
        found.sort(key=lambda box: np.prod([s.stop - s.start for s in box]))
        boxes[cls] = [(tuple(s.start for s in box), tuple(s.stop for s in box)) for box in found[-2:]]
    return boxes


def foreground_start(rng: np.random.Generator, box: tuple, patch, shape) -> list[int]:
    """A patch corner drawn so that the patch covers the box (or lies inside it where the box is larger)."""
    corner = []
    for low, high, size, side in zip(*box, patch, shape, strict=True):
        first, last = (high - size, low) if high - low <= size else (low, high - size)
        first, last = max(0, min(first, side - size)), max(0, min(last, side - size))
        corner.append(int(rng.integers(first, last + 1)))
    return corner


@dataclasses.dataclass
class PatchLoader:
    """Random training patches of ``cases`` (see the module docstring)."""

    cases: dict
    patch: tuple
    batch_size: int
    oversampling: float
    seed: int
    rank: int = 0
    world_size: int = 1
    device: str | torch.device = "cpu"

    def __post_init__(self):
        self.names = sorted(self.cases)
        for name in self.names:
            shape = self.cases[name][0].shape[1:]
            if any(s < p for s, p in zip(shape, self.patch, strict=True)):
                raise UserError(f"case {name} of shape {shape} is smaller than the patch {tuple(self.patch)}")
        self.boxes = {name: foreground_boxes(self.cases[name][1]) for name in self.names}
        self.device = torch.device(self.device)

    @property
    def batches_per_epoch(self) -> int:
        """Steps of one epoch: every case once over all ranks (the last partial step dropped, at least 1)."""
        return max(1, len(self.names) // (self.batch_size * self.world_size))

    @property
    def samples_per_epoch(self) -> int:
        return len(self.names)

    def epoch(self, epoch: int, start_step: int = 0):
        """The epoch's batches from ``start_step`` on: (images [B,1,*patch] float32, labels [B,1,*patch] uint8)
        on the device, augmented."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.names))
        per_step = self.batch_size * self.world_size
        for step in range(start_step, self.batches_per_epoch):
            samples = range(
                step * per_step + self.rank * self.batch_size,
                step * per_step + (self.rank + 1) * self.batch_size,
            )
            crops = [
                self.crop(self.names[order[i % len(order)]], np.random.default_rng([self.seed, epoch, i]))
                for i in samples
            ]
            images = torch.from_numpy(np.stack([c[0] for c in crops])).to(self.device, non_blocking=True)
            labels = torch.from_numpy(np.stack([c[1] for c in crops])).to(self.device, non_blocking=True)
            generators = [
                torch.Generator(self.device).manual_seed(hash((self.seed, epoch, i)) % 2**63) for i in samples
            ]
            yield augment(images, labels, generators)

    def crop(self, name: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        image, label = self.cases[name]
        shape = image.shape[1:]
        boxes = self.boxes[name]
        if boxes and rng.random() < self.oversampling:
            regions = boxes[sorted(boxes)[int(rng.integers(len(boxes)))]]
            corner = foreground_start(rng, regions[int(rng.integers(len(regions)))], self.patch, shape)
        else:
            corner = [int(rng.integers(0, s - p + 1)) for s, p in zip(shape, self.patch, strict=True)]
        window = (slice(None), *(slice(c, c + p) for c, p in zip(corner, self.patch, strict=True)))
        return np.ascontiguousarray(image[window], dtype=np.float32), np.ascontiguousarray(label[window])


def augment(images: torch.Tensor, labels: torch.Tensor, generators: list[torch.Generator]):
    """MLPerf's training augmentation on the device, sample i's draws from ``generators[i]``: random flips
    of each axis (image and label together), intensity scaling, Gaussian noise."""
    device = images.device
    out_images, out_labels = [], []
    for i, generator in enumerate(generators):
        draws = torch.rand(7, generator=generator, device=device).tolist()  # the one sync of a sample
        axes = [axis + 1 for axis in range(3) if draws[axis] < FLIP_PROBABILITY]
        image, label = images[i], labels[i]
        if axes:
            image, label = image.flip(axes), label.flip(axes)
        if draws[3] < BRIGHTNESS[0]:
            image = image * (1 - BRIGHTNESS[1] + 2 * BRIGHTNESS[1] * draws[5])
        if draws[4] < NOISE[0]:
            deviation = NOISE[1] * draws[6]
            image = image + deviation * torch.randn(image.shape, generator=generator, device=device)
        out_images.append(image)
        out_labels.append(label)
    return torch.stack(out_images), torch.stack(out_labels)


def volumes(cases: dict, rank: int = 0, world_size: int = 1, device="cpu"):
    """This rank's share of the evaluation cases: (name, image [1,1,D,H,W], label [1,1,D,H,W]) on the device."""
    for name in sorted(cases)[rank::world_size]:
        image, label = cases[name]
        yield (
            name,
            torch.from_numpy(np.array(image, dtype=np.float32)[None]).to(device),
            torch.from_numpy(np.array(label)[None]).to(device),
        )
