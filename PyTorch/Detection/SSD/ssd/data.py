"""COCO-format input for SSD300: a dataset reader, SSD's augmentations as a torchvision-v2 pipeline,
a DALI pipeline where DALI is installed, and synthetic batches.

Every backend yields batches of ``images (B, 3, S, S)`` float, ``boxes (B, M, 4)`` xyxy normalised to
[0, 1] and ``labels (B, M)`` int64 padded with 0 (background); the training loop encodes them against
the default boxes on the device (:func:`ssd.boxes.match`), once per batch.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from zoo.coco.sampling import EpochSampler
from zoo.errors import UserError, one_line

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@dataclass
class Batch:
    images: torch.Tensor
    boxes: torch.Tensor
    labels: torch.Tensor
    image_ids: torch.Tensor  # COCO image ids, for evaluation
    sizes: torch.Tensor  # (B, 2) original (height, width)

    def to(self, device: torch.device, non_blocking: bool = True) -> Batch:
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in self.__dict__.values()))


def check_annotations(path: str | os.PathLike) -> dict:
    """Read a COCO annotation file and check the fields SSD uses; UserError naming the file and the entry."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"annotation file {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"annotation file {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"annotation file {path}: top level is {type(data).__name__}, want an object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise UserError(f"annotation file {path} has no '{key}' list (not a COCO detection file)")
    if not data["categories"]:
        raise UserError(f"annotation file {path} lists no categories")
    image_ids = {img.get("id") for img in data["images"]}
    cat_ids = {c.get("id") for c in data["categories"]}
    for i, ann in enumerate(data["annotations"]):
        bbox = ann.get("bbox")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) for v in bbox)):
            raise UserError(f"annotation file {path}: annotation #{i} has bbox {bbox!r}, want [x, y, w, h]")
        if ann.get("image_id") not in image_ids:
            raise UserError(
                f"annotation file {path}: annotation #{i} names unknown image_id {ann.get('image_id')!r}"
            )
        if ann.get("category_id") not in cat_ids:
            raise UserError(
                f"annotation file {path}: annotation #{i} names unknown category_id {ann.get('category_id')!r}"
            )
    return data


class CocoDetection(Dataset):
    """Images and boxes of a COCO-format annotation file; labels are 1..K in sorted category-id order."""

    def __init__(self, image_dir: str | os.PathLike, annotation_file: str | os.PathLike, transform=None):
        self.image_dir = Path(image_dir)
        if not self.image_dir.is_dir():
            raise UserError(f"image folder {self.image_dir} does not exist")
        data = check_annotations(annotation_file)
        self.annotation_file = str(annotation_file)
        self.category_ids = sorted(c["id"] for c in data["categories"])
        self.category_names = {c["id"]: c.get("name", str(c["id"])) for c in data["categories"]}
        label_of = {cid: i + 1 for i, cid in enumerate(self.category_ids)}
        self.images = sorted(data["images"], key=lambda im: im["id"])
        self.objects: dict[int, list[tuple[list[float], int]]] = {im["id"]: [] for im in self.images}
        for ann in data["annotations"]:
            x, y, w, h = ann["bbox"]
            if ann.get("iscrowd", 0) or w < 1 or h < 1:
                continue
            self.objects[ann["image_id"]].append(([x, y, x + w, y + h], label_of[ann["category_id"]]))
        self.transform = transform

    @property
    def num_classes(self) -> int:
        return len(self.category_ids) + 1

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        from PIL import Image, UnidentifiedImageError
        from torchvision import tv_tensors
        from torchvision.transforms.v2.functional import pil_to_tensor

        info = self.images[index]
        path = self.image_dir / info["file_name"]
        try:
            with Image.open(path) as im:
                image = pil_to_tensor(im.convert("RGB"))
        except (UnidentifiedImageError, OSError) as e:
            raise UserError(f"cannot read image {path}: {one_line(e)}") from None
        h, w = image.shape[-2:]
        objs = self.objects[info["id"]]
        boxes = torch.tensor([o[0] for o in objs], dtype=torch.float32).reshape(-1, 4)
        target = {
            "boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w)),
            "labels": torch.tensor([o[1] for o in objs], dtype=torch.int64),
        }
        image = tv_tensors.Image(image)
        if self.transform is not None:
            image, target = self.transform(image, target)
        size = image.shape[-1]
        return image, target["boxes"].as_subclass(torch.Tensor) / size, target["labels"], info["id"], (h, w)


def build_transforms(train: bool, image_size: int = 300, augment: bool = True):
    """SSD's augmentations: colour jitter, zoom-out, IoU-constrained crop, flip; then resize + normalise."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    steps = []
    if train and augment:
        steps += [
            v2.RandomPhotometricDistort(p=0.5),
            v2.RandomZoomOut(
                fill={tv_tensors.Image: [int(255 * m) for m in MEAN], "others": 0},
                side_range=(1.0, 4.0),
                p=0.5,
            ),
            v2.RandomIoUCrop(),
            v2.SanitizeBoundingBoxes(),
            v2.RandomHorizontalFlip(p=0.5),
        ]
    steps += [
        v2.Resize((image_size, image_size), antialias=True),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
    if train:
        steps.append(v2.ClampBoundingBoxes())
    return v2.Compose(steps)


def collate(samples) -> Batch:
    """Stack images; pad boxes/labels to the batch's largest object count (label 0 = padding)."""
    images, boxes, labels, ids, sizes = zip(*samples, strict=True)
    m = max(1, max(len(lab) for lab in labels))
    pb = torch.zeros(len(samples), m, 4)
    pl = torch.zeros(len(samples), m, dtype=torch.int64)
    for i, (b, lab) in enumerate(zip(boxes, labels, strict=True)):
        pb[i, : len(lab)] = b
        pl[i, : len(lab)] = lab
    return Batch(torch.stack(images), pb, pl, torch.tensor(ids), torch.tensor(sizes))


def build_loader(
    image_dir,
    annotation_file,
    *,
    train: bool,
    batch_size: int,
    image_size: int = 300,
    augment: bool = True,
    workers: int = 4,
    world_size: int = 1,
    rank: int = 0,
    seed: int = 0,
    drop_last: bool | None = None,
) -> DataLoader:
    """A DataLoader over a COCO-format set, sharded across ranks with a DistributedSampler."""
    dataset = CocoDetection(image_dir, annotation_file, build_transforms(train, image_size, augment))
    sampler = EpochSampler(
        dataset, world_size, rank, shuffle=train, seed=seed, drop_last=train, batch_size=batch_size
    )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        # its own generator: an iterator's worker seed is not drawn from the global one, so a run resumed
        # inside an epoch draws the augmentations the unbroken run drew
        generator=torch.Generator().manual_seed(seed + rank),
        num_workers=workers,
        collate_fn=collate,
        pin_memory=torch.cuda.is_available(),
        drop_last=train if drop_last is None else drop_last,
        persistent_workers=workers > 0,
    )


class SyntheticLoader:
    """Random images and boxes made once on the device and yielded ``steps`` times (speed tests):
    ``variants`` different batches, in turn."""

    def __init__(
        self,
        batch_size: int,
        steps: int,
        num_classes: int = 81,
        image_size: int = 300,
        objects: int = 8,
        device="cpu",
        seed: int = 0,
        variants: int = 1,
    ):
        g = torch.Generator().manual_seed(seed)
        self.batches = []
        for _ in range(variants):
            xy = torch.rand(batch_size, objects, 2, generator=g) * 0.7
            wh = 0.05 + torch.rand(batch_size, objects, 2, generator=g) * 0.25
            batch = Batch(
                torch.randn(batch_size, 3, image_size, image_size, generator=g),
                torch.cat([xy, xy + wh], -1),
                torch.randint(1, num_classes, (batch_size, objects), generator=g),
                torch.arange(batch_size),
                torch.full((batch_size, 2), image_size),
            )
            self.batches.append(batch.to(torch.device(device)))
        self.batch = self.batches[0]
        self.steps = steps
        self.sampler = None

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for step in range(self.steps):
            yield self.batches[step % len(self.batches)]


class DaliLoader:
    """SSD augmentations on DALI (``device='gpu'`` decodes with nvJPEG; ``'cpu'`` keeps all on the host).

    Yields the same :class:`Batch` as the PyTorch loader. Needs ``nvidia-dali`` (in NGC containers).
    """

    def __init__(
        self,
        image_dir,
        annotation_file,
        *,
        batch_size: int,
        image_size: int = 300,
        train: bool = True,
        device: str = "gpu",
        world_size: int = 1,
        rank: int = 0,
        workers: int = 4,
        seed: int = 0,
    ):
        try:
            from nvidia.dali import fn, pipeline_def, types
            from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
        except ImportError:
            raise UserError(
                "--data-backend dali-* needs nvidia-dali (present in NGC containers); "
                "use --data-backend pytorch"
            ) from None
        data = check_annotations(annotation_file)
        self.num_classes = len(data["categories"]) + 1
        self.size = math.ceil(len(data["images"]) / world_size)
        self.batch_size = batch_size
        gpu = device == "gpu"

        @pipeline_def(
            batch_size=batch_size,
            num_threads=max(1, workers),
            device_id=rank % max(1, torch.cuda.device_count())
            if gpu
            else None,  # CPU pipeline: no GPU needed
            seed=seed + rank,
        )
        def pipeline():
            jpegs, boxes, labels, ids = fn.readers.coco(
                file_root=str(image_dir),
                annotations_file=str(annotation_file),
                ltrb=True,
                ratio=True,
                skip_empty=train,
                shard_id=rank,
                num_shards=world_size,
                random_shuffle=train,
                image_ids=True,
                name="reader",
            )
            images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
            shape = fn.peek_image_shape(jpegs)
            if train:
                crop_begin, crop_size, boxes, labels = fn.random_bbox_crop(
                    boxes,
                    labels,
                    aspect_ratio=[0.5, 2.0],
                    thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
                    scaling=[0.3, 1.0],
                    bbox_layout="xyXY",
                    allow_no_crop=True,
                    num_attempts=50,
                )
                images = fn.slice(images, crop_begin, crop_size, out_of_bounds_policy="trim_to_shape")
                flip = fn.random.coin_flip(probability=0.5)
                boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
                images = fn.resize(images, resize_x=image_size, resize_y=image_size)
                images = fn.hsv(
                    images,
                    dtype=types.UINT8,
                    hue=fn.random.uniform(range=[-18, 18]),
                    saturation=fn.random.uniform(range=[0.5, 1.5]),
                )
                images = fn.brightness_contrast(
                    images,
                    brightness=fn.random.uniform(range=[0.875, 1.125]),
                    contrast=fn.random.uniform(range=[0.5, 1.5]),
                )
            else:
                flip = 0
                images = fn.resize(images, resize_x=image_size, resize_y=image_size)
            images = fn.crop_mirror_normalize(
                images,
                mirror=flip,
                dtype=types.FLOAT,
                output_layout="CHW",
                mean=[255 * m for m in MEAN],
                std=[255 * s for s in STD],
            )
            # Object counts differ per image: pad to the batch's largest count (label 0 = padding).
            boxes = fn.pad(boxes, axes=(0,), fill_value=0.0)
            labels = fn.pad(labels, axes=(0,), fill_value=0)
            if gpu:
                boxes, labels = boxes.gpu(), labels.gpu()
            return images, boxes, labels, ids, shape

        self.pipe = pipeline()
        self.pipe.build()
        self.iterator = DALIGenericIterator(
            [self.pipe],
            ["images", "boxes", "labels", "ids", "shape"],
            reader_name="reader",
            dynamic_shape=True,
            last_batch_policy=LastBatchPolicy.DROP if train else LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )
        self.category_ids = sorted(c["id"] for c in data["categories"])
        self.category_names = {c["id"]: c.get("name", str(c["id"])) for c in data["categories"]}
        self.sampler = None

    def __len__(self) -> int:
        return self.size // self.batch_size

    def __iter__(self):
        for out in self.iterator:
            d = out[0]
            # DALI's COCO reader numbers categories 1..K in sorted-id order, as CocoDetection does.
            b = d["images"].shape[0]
            boxes, labels = d["boxes"], d["labels"].reshape(b, -1).long()
            yield Batch(
                d["images"],
                boxes.reshape(b, -1, 4),
                labels,
                d["ids"].reshape(-1),
                d["shape"][:, :2].reshape(b, 2),
            )
