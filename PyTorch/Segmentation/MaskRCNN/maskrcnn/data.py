"""COCO instance segmentation for Mask R-CNN: checked annotations, masks decoded with pycocotools,
horizontal flip, aspect-ratio grouped batches, sharded across processes.

Images go to the model as float ``(3, H, W)`` tensors in [0, 1] at their own size; the model resizes
them (shorter side ``min_size``, longer at most ``max_size``). Labels are COCO category ids.
Annotation problems (no segmentation, a polygon outside its image, an unknown category or image)
end in one line naming the file, the annotation and the problem.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import torch
from zoo.errors import UserError, one_line

# Polygon points may sit this many pixels outside the image (COCO's own polygons touch the border).
POLYGON_SLACK = 2.0


def fail(path, message: str):
    raise UserError(f"{path}: {message}")


def read_annotations(path) -> dict:
    """The COCO annotation file, checked (see the module docstring); a UserError of one line if not."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"annotation file {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(path, f"not valid JSON ({e})")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data, dict) or key not in data:
            fail(path, f"no '{key}' list (not a COCO instances file)")
    images = {img["id"]: img for img in data["images"]}
    categories = {c["id"] for c in data["categories"]}
    for ann in data["annotations"]:
        check_annotation(path, ann, images, categories)
    return data


def check_annotation(path, ann: dict, images: dict, categories: set) -> None:
    aid = ann.get("id")
    if ann.get("category_id") not in categories:
        fail(path, f"annotation {aid} has unknown category {ann.get('category_id')}")
    img = images.get(ann.get("image_id"))
    if img is None:
        fail(path, f"annotation {aid} refers to unknown image {ann.get('image_id')}")
    seg = ann.get("segmentation")
    if not seg:
        fail(path, f"annotation {aid} (image {img['id']}) has no segmentation")
    w, h = img["width"], img["height"]
    if isinstance(seg, list):
        for poly in seg:
            if len(poly) < 6 or len(poly) % 2:
                fail(path, f"annotation {aid} (image {img['id']}) has a polygon of {len(poly)} numbers")
            xs, ys = np.asarray(poly[0::2], float), np.asarray(poly[1::2], float)
            if (
                xs.min() < -POLYGON_SLACK
                or ys.min() < -POLYGON_SLACK
                or xs.max() > w + POLYGON_SLACK
                or ys.max() > h + POLYGON_SLACK
            ):
                fail(path, f"annotation {aid} (image {img['id']}) has a polygon outside its {w}x{h} image")
    elif isinstance(seg, dict):
        if list(seg.get("size", [])) != [h, w] or "counts" not in seg:
            fail(
                path,
                f"annotation {aid} (image {img['id']}) has an RLE of size {seg.get('size')}, image is {h}x{w}",
            )
        runs = rle_runs(seg["counts"])
        # pycocotools decodes runs that do not cover the image exactly into uninitialised memory
        if runs is None or min(runs, default=0) < 0 or sum(runs) != h * w:
            fail(
                path,
                f"annotation {aid} (image {img['id']}) has an invalid RLE (its runs do not cover {h}x{w})",
            )
    else:
        fail(path, f"annotation {aid} (image {img['id']}) has a segmentation of type {type(seg).__name__}")


def rle_runs(counts) -> list[int] | None:
    """The run lengths of an RLE's ``counts``: a list of integers as it is, or COCO's compressed string
    (six bits a character from "0", five of them value, the sixth "more follows"; runs after the second
    are stored as the difference to the run two before). None where ``counts`` is neither."""
    if isinstance(counts, list):
        return counts if all(isinstance(c, int) and not isinstance(c, bool) for c in counts) else None
    if not isinstance(counts, str):
        return None
    runs, value, shift = [], 0, 0
    for char in counts:
        code = ord(char) - 48
        if not 0 <= code < 64:
            return None
        value |= (code & 0x1F) << shift
        shift += 5
        if code & 0x20:
            continue
        if code & 0x10:
            value -= 1 << shift  # the last group's top bit is the sign
        runs.append(value + (runs[-2] if len(runs) > 2 else 0))
        value, shift = 0, 0
    return runs if shift == 0 else None


def decode_mask(seg, height: int, width: int) -> np.ndarray:
    """A polygon list or RLE (compressed or not) as a ``(H, W)`` uint8 mask."""
    from pycocotools import mask as mask_utils

    if isinstance(seg, list):
        rle = mask_utils.merge(mask_utils.frPyObjects(seg, height, width))
    elif isinstance(seg["counts"], list):
        rle = mask_utils.frPyObjects(seg, height, width)
    else:
        rle = {"size": seg["size"], "counts": seg["counts"].encode("ascii")}
    return mask_utils.decode(rle)


class CocoInstances(torch.utils.data.Dataset):
    """One COCO split: ``dataset[(index, flip)]`` -> (image, target) with target ``boxes`` (xyxy pixels),
    ``labels`` (category ids), ``masks (N, H, W)`` uint8 and ``image_id``.

    ``train``: images without a usable (non-crowd, non-empty) instance are left out, as MLPerf does.
    """

    def __init__(self, image_dir, annotation_file, *, train: bool):
        self.image_dir = Path(image_dir)
        self.annotation_file = str(annotation_file)
        if not self.image_dir.is_dir():
            raise UserError(f"image folder {self.image_dir} does not exist")
        data = read_annotations(annotation_file)
        self.category_ids = sorted(c["id"] for c in data["categories"])
        self.category_names = {c["id"]: c["name"] for c in data["categories"]}
        self.num_classes = max(self.category_ids) + 1
        by_image: dict[int, list] = {img["id"]: [] for img in data["images"]}
        for ann in data["annotations"]:
            if not ann.get("iscrowd", 0) and ann["bbox"][2] >= 1 and ann["bbox"][3] >= 1:
                by_image[ann["image_id"]].append(ann)
        self.images = [img for img in data["images"] if by_image[img["id"]] or not train]
        self.annotations = by_image
        if not self.images:
            fail(annotation_file, "no image with a usable instance")

    def __len__(self) -> int:
        return len(self.images)

    def aspect_groups(self) -> list[int]:
        """0 for landscape (w >= h), 1 for portrait, per image."""
        return [int(img["height"] > img["width"]) for img in self.images]

    def __getitem__(self, item):
        from PIL import Image, UnidentifiedImageError
        from torchvision.transforms.v2 import functional as F

        index, flip = item if isinstance(item, tuple) else (item, False)
        info = self.images[index]
        path = self.image_dir / info["file_name"]
        try:
            with Image.open(path) as im:
                image = F.to_dtype(F.pil_to_tensor(im.convert("RGB")), torch.float32, scale=True)
        except (FileNotFoundError, UnidentifiedImageError, OSError) as e:
            raise UserError(f"cannot read image {path}: {one_line(e)}") from None
        h, w = image.shape[1:]
        anns = self.annotations[info["id"]]
        boxes = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        masks = (
            np.stack([decode_mask(a["segmentation"], h, w) for a in anns]) if anns else np.zeros((0, h, w))
        )
        target = {
            "boxes": boxes,
            "labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64),
            "masks": torch.from_numpy(masks.astype(np.uint8)),
            "image_id": info["id"],
        }
        if flip:
            image = image.flip(-1)
            target["masks"] = target["masks"].flip(-1)
            target["boxes"] = torch.stack([w - boxes[:, 2], boxes[:, 1], w - boxes[:, 0], boxes[:, 3]], 1)
        return image, target


class GroupedBatchSampler(torch.utils.data.Sampler):
    """Batches of ``(index, flip)`` whose images share an aspect group (landscape or portrait).

    Epoch ``e`` shuffles with ``seed + e``, gives every process the same number of images (its shard of
    one permutation), and fills one batch per group; flips are drawn from the same seed, so a resumed
    epoch sees exactly the batches an unbroken run does. A group's last partial batch is dropped.
    Without ``shuffle`` (evaluation) the order is kept, nothing is flipped or dropped.
    ``set_epoch(epoch, start_batch)`` starts the next pass at a batch (a run resumed inside an epoch reads
    none of the images of the batches done); a later pass starts at the epoch's first batch again.
    """

    def __init__(self, groups, batch_size, *, shuffle=True, flip=True, world_size=1, rank=0, seed=0):
        self.groups, self.batch_size, self.shuffle, self.flip = list(groups), batch_size, shuffle, flip
        self.world_size, self.rank, self.seed, self.epoch = world_size, rank, seed, 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def _shard(self) -> list[int]:
        order = list(range(len(self.groups)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        per_rank = -(-len(order) // self.world_size)
        order = (
            (order * 2)[: per_rank * self.world_size] if len(order) < per_rank * self.world_size else order
        )
        return order[self.rank :: self.world_size]

    def __iter__(self):
        start, self.start_batch = self.start_batch, 0
        return itertools.islice(self._batches(), start, None)

    def _batches(self):
        rng = random.Random((self.seed + self.epoch) * 1000003 + self.rank)
        buckets: dict[int, list] = {}
        for index in self._shard():
            flip = self.flip and self.shuffle and rng.random() < 0.5
            bucket = buckets.setdefault(self.groups[index], [])
            bucket.append((index, flip))
            if len(bucket) == self.batch_size:
                yield list(bucket)
                bucket.clear()
        if not self.shuffle:
            for bucket in buckets.values():
                if bucket:
                    yield list(bucket)

    def __len__(self) -> int:
        return sum(1 for _ in self._batches())


def collate(batch):
    images, targets = zip(*batch, strict=True)
    return list(images), list(targets)


def build_loader(image_dir, annotation_file, *, train, batch_size, workers=0, world_size=1, rank=0, seed=0):
    """DataLoader over :class:`CocoInstances` with :class:`GroupedBatchSampler`."""
    ds = CocoInstances(image_dir, annotation_file, train=train)
    sampler = GroupedBatchSampler(
        ds.aspect_groups(), batch_size, shuffle=train, flip=train, world_size=world_size, rank=rank, seed=seed
    )
    # its own generator: an iterator's worker seed is not drawn from the global one (which samples the
    # proposals), so a run resumed inside an epoch draws what the unbroken run drew
    return torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, num_workers=workers, collate_fn=collate, persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(seed + rank),
    )  # fmt: skip
