"""COCO-format input for RetinaNet (OpenImages-MLPerf and COCO 2017 are both prepared in this format):
an annotation check, a reader, MLPerf's augmentation (a horizontal flip) and its fixed-size resize,
and synthetic batches.

Every loader yields batches of ``images (B, 3, S, S)`` float normalised with the ImageNet mean and std,
``boxes (B, M, 4)`` xyxy in pixels of the resized image and ``labels (B, M)`` int64 in 0..K-1, padded
with -1; the step matches them to the anchors on the device.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from zoo.coco.sampling import EpochSampler
from zoo.errors import UserError, one_line

from retinanet.model import MEAN, STD


@dataclass
class Batch:
    images: torch.Tensor
    boxes: torch.Tensor
    labels: torch.Tensor
    image_ids: torch.Tensor  # COCO image ids, for evaluation
    sizes: torch.Tensor  # (B, 2) original (height, width)

    def to(self, device, non_blocking: bool = True) -> Batch:
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in self.__dict__.values()))


def check_annotations(path: str | os.PathLike) -> dict:
    """A COCO detection file read and checked; a UserError naming the file and the first bad entry."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"annotation file {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"annotation file {path} is not valid JSON: {one_line(e)}") from None
    if not isinstance(data, dict):
        raise UserError(f"annotation file {path}: top level is {type(data).__name__}, want an object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise UserError(f"annotation file {path} has no '{key}' list (not a COCO detection file)")
    if not data["categories"]:
        raise UserError(f"annotation file {path} lists no categories")
    for i, image in enumerate(data["images"]):
        if not isinstance(image, dict) or "id" not in image or "file_name" not in image:
            raise UserError(f"annotation file {path}: image #{i} has no 'id' and 'file_name'")
    image_ids = {image["id"] for image in data["images"]}
    category_ids = {c.get("id") for c in data["categories"]}
    for i, ann in enumerate(data["annotations"]):
        bbox = ann.get("bbox") if isinstance(ann, dict) else None
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) for v in bbox)):
            raise UserError(f"annotation file {path}: annotation #{i} has bbox {bbox!r}, want [x, y, w, h]")
        if ann.get("image_id") not in image_ids:
            raise UserError(
                f"annotation file {path}: annotation #{i} names unknown image_id {ann.get('image_id')!r}"
            )
        if ann.get("category_id") not in category_ids:
            raise UserError(
                f"annotation file {path}: annotation #{i} names unknown category_id {ann.get('category_id')!r}"
            )
    return data


class CocoDetection(Dataset):
    """Images and boxes of a COCO-format file, resized to ``image_size`` x ``image_size`` (MLPerf's
    800 x 800, aspect ratio not kept) and flipped at random when ``flip``; labels 0..K-1 in sorted
    category-id order. Crowd (OpenImages' IsGroupOf) and degenerate boxes are left out of training."""

    def __init__(self, image_dir, annotation_file, *, image_size: int, flip: bool = False):
        self.image_dir = Path(image_dir)
        if not self.image_dir.is_dir():
            raise UserError(f"image folder {self.image_dir} does not exist")
        data = check_annotations(annotation_file)
        self.annotation_file = str(annotation_file)
        self.category_ids = sorted(c["id"] for c in data["categories"])
        self.category_names = {c["id"]: c.get("name", str(c["id"])) for c in data["categories"]}
        label_of = {cid: i for i, cid in enumerate(self.category_ids)}
        self.images = sorted(data["images"], key=lambda im: im["id"])
        self.objects: dict = {im["id"]: [] for im in self.images}
        for ann in data["annotations"]:
            x, y, w, h = ann["bbox"]
            if ann.get("iscrowd", 0) or w < 1 or h < 1:
                continue
            self.objects[ann["image_id"]].append(([x, y, x + w, y + h], label_of[ann["category_id"]]))
        self.image_size, self.flip = image_size, flip

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        from PIL import Image, UnidentifiedImageError
        from torchvision.transforms.v2 import functional as F

        info = self.images[index]
        path = self.image_dir / info["file_name"]
        try:
            with Image.open(path) as im:
                image = F.pil_to_tensor(im.convert("RGB"))
        except (UnidentifiedImageError, OSError) as e:
            raise UserError(f"cannot read image {path}: {one_line(e)}") from None
        h, w = image.shape[-2:]
        size = self.image_size
        objects = self.objects[info["id"]]
        boxes = torch.tensor([o[0] for o in objects], dtype=torch.float32).reshape(-1, 4)
        boxes = boxes * torch.tensor([size / w, size / h, size / w, size / h])
        labels = torch.tensor([o[1] for o in objects], dtype=torch.int64)
        image = F.resize(image, [size, size], antialias=True)
        if self.flip and torch.rand(1).item() < 0.5:
            image = image.flip(-1)
            boxes = torch.stack([size - boxes[:, 2], boxes[:, 1], size - boxes[:, 0], boxes[:, 3]], dim=1)
        image = F.normalize(F.to_dtype(image, torch.float32, scale=True), MEAN, STD)
        return image, boxes, labels, info["id"], (h, w)


def collate(samples) -> Batch:
    """Stack images; pad boxes and labels to the batch's largest object count (label -1 = padding)."""
    images, boxes, labels, ids, sizes = zip(*samples, strict=True)
    most = max(1, max(len(lab) for lab in labels))
    padded_boxes = torch.zeros(len(samples), most, 4)
    padded_labels = torch.full((len(samples), most), -1, dtype=torch.int64)
    for i, (b, lab) in enumerate(zip(boxes, labels, strict=True)):
        padded_boxes[i, : len(lab)] = b
        padded_labels[i, : len(lab)] = lab
    return Batch(torch.stack(images), padded_boxes, padded_labels, torch.tensor(ids), torch.tensor(sizes))


def build_loader(image_dir, annotation_file, *, train: bool, batch_size: int, image_size: int,
                 flip: bool = True, workers: int = 4, world_size: int = 1, rank: int = 0,
                 seed: int = 0) -> DataLoader:  # fmt: skip
    """A DataLoader over a COCO-format set, sharded across ranks with a DistributedSampler (training
    drops the last partial batch; evaluation pads the last shard, zoo.coco merges the duplicates)."""
    dataset = CocoDetection(image_dir, annotation_file, image_size=image_size, flip=train and flip)
    sampler = EpochSampler(
        dataset, world_size, rank, shuffle=train, seed=seed, drop_last=train, batch_size=batch_size
    )
    # its own generator: an iterator's worker seed is not drawn from the global one, so a run resumed
    # inside an epoch draws the flips the unbroken run drew
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, num_workers=workers, collate_fn=collate,
        pin_memory=torch.cuda.is_available(), drop_last=train, persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(seed + rank),
    )  # fmt: skip


class SyntheticLoader:
    """Random images and boxes made once on the device and yielded ``steps`` times (speed tests and
    ``--synthetic``): ``variants`` different batches, in turn."""

    def __init__(self, batch_size: int, steps: int, *, num_classes: int, image_size: int, objects: int = 8,
                 device="cpu", seed: int = 0, variants: int = 1):  # fmt: skip
        g = torch.Generator().manual_seed(seed)
        self.batches = []
        for _ in range(variants):
            xy = torch.rand(batch_size, objects, 2, generator=g) * 0.7
            wh = 0.05 + torch.rand(batch_size, objects, 2, generator=g) * 0.25
            batch = Batch(
                torch.randn(batch_size, 3, image_size, image_size, generator=g),
                torch.cat([xy, xy + wh], -1) * image_size,
                torch.randint(0, num_classes, (batch_size, objects), generator=g),
                torch.arange(batch_size),
                torch.full((batch_size, 2), image_size),
            )
            self.batches.append(batch.to(torch.device(device)))
        self.steps = steps
        self.sampler = None

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for step in range(self.steps):
            yield self.batches[step % len(self.batches)]
