import json

import numpy as np
import pytest
import torch
from maskrcnn.data import CocoInstances, GroupedBatchSampler, build_loader, rle_runs
from maskrcnn.shapes import COLOURS, make_shapes_coco
from PIL import Image
from zoo.errors import UserError


def test_shapes_masks_are_exactly_the_drawn_pixels(tmp_path):
    image_dir, ann = make_shapes_coco(tmp_path, images=6, size=96, seed=3, split="train")
    data = json.loads(ann.read_text())
    kinds = {type(a["segmentation"]).__name__ for a in data["annotations"]}
    assert kinds == {"list", "dict"}  # polygons and RLE
    ds = CocoInstances(image_dir, ann, train=True)
    for index in range(len(ds)):
        image, target = ds[index]
        pixels = np.asarray(Image.open(image_dir / ds.images[index]["file_name"]))
        for mask, label, box in zip(target["masks"], target["labels"], target["boxes"], strict=True):
            colour = COLOURS[data["categories"][int(label) - 1]["name"]]
            drawn = (pixels == colour).all(-1)
            inside = torch.zeros_like(mask, dtype=torch.bool)
            x0, y0, x1, y1 = box.int().tolist()
            inside[y0:y1, x0:x1] = True
            assert torch.equal(mask.bool(), torch.from_numpy(drawn) & inside)
        assert image.shape == (3, 96, 96) and 0 <= image.min() and image.max() <= 1


def test_flip_mirrors_image_boxes_and_masks(tmp_path):
    image_dir, ann = make_shapes_coco(tmp_path, images=2, size=64, seed=1, split="train")
    ds = CocoInstances(image_dir, ann, train=True)
    image, target = ds[(0, False)]
    flipped, ftarget = ds[(0, True)]
    assert torch.equal(flipped, image.flip(-1))
    assert torch.equal(ftarget["masks"], target["masks"].flip(-1))
    for mask, box in zip(ftarget["masks"], ftarget["boxes"], strict=True):
        ys, xs = torch.nonzero(mask, as_tuple=True)
        assert box.tolist() == [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1]


def test_batches_share_an_aspect_group_and_shards_are_disjoint():
    groups = [0, 1] * 10 + [0] * 5
    shards = [list(GroupedBatchSampler(groups, 2, world_size=2, rank=r, seed=4)) for r in (0, 1)]
    for batches in shards:
        for batch in batches:
            assert len({groups[i] for i, _ in batch}) == 1 and len(batch) == 2
    seen = [[i for b in batches for i, _ in b] for batches in shards]
    assert not set(seen[0]) & set(seen[1])
    again = GroupedBatchSampler(groups, 2, world_size=2, rank=0, seed=4)
    assert list(again) == shards[0]  # the same epoch gives the same batches and flips
    again.set_epoch(1)
    assert list(again) != shards[0]


def test_evaluation_loader_keeps_every_image_once(tmp_path):
    image_dir, ann = make_shapes_coco(tmp_path, images=5, size=64, split="val")
    loader = build_loader(image_dir, ann, train=False, batch_size=2)
    ids = [t["image_id"] for _, targets in loader for t in targets]
    assert sorted(ids) == [1, 2, 3, 4, 5]


def broken(tmp_path, change):
    image_dir, ann = make_shapes_coco(tmp_path, images=2, size=64, split="train")
    data = json.loads(ann.read_text())
    change(data)
    ann.write_text(json.dumps(data))
    return image_dir, ann


def polygon_out_of_image(data):
    data["annotations"][0]["segmentation"] = [[0, 0, 40, 0, 40, 90, 0, 90]]


def rle_of_other_size(data):
    data["annotations"][0]["segmentation"] = {"size": [10, 10], "counts": "abc"}


INVALID_RLE = "annotation 1 (image 1) has an invalid RLE (its runs do not cover 64x64)"


def rle_counts(data, counts):
    data["annotations"][0]["segmentation"] = {"size": [64, 64], "counts": counts}


def test_rle_runs_read_what_pycocotools_wrote():
    from pycocotools import mask as mask_utils

    rng = np.random.default_rng(0)
    for _ in range(50):
        h, w = rng.integers(1, 40, 2)
        mask = (rng.random((h, w)) < rng.random()).astype(np.uint8)
        counts = mask_utils.encode(np.asfortranarray(mask))["counts"].decode("ascii")
        runs = rle_runs(counts)
        column_major = np.concatenate([np.full(n, i % 2, np.uint8) for i, n in enumerate(runs)])
        assert (column_major.reshape(w, h).T == mask).all()
    assert rle_runs("0") == [0] and rle_runs("!!!") is None and rle_runs([3, 4]) == [3, 4]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["annotations"][0].pop("segmentation"), "annotation 1 (image 1) has no segmentation"),
        (polygon_out_of_image, "annotation 1 (image 1) has a polygon outside its 64x64 image"),
        (lambda d: d["annotations"][0].update(category_id=77), "annotation 1 has unknown category 77"),
        (lambda d: d["annotations"][0].update(image_id=99), "annotation 1 refers to unknown image 99"),
        (rle_of_other_size, "annotation 1 (image 1) has an RLE of size [10, 10], image is 64x64"),
        (lambda d: rle_counts(d, "0"), INVALID_RLE),
        (lambda d: rle_counts(d, "!!!"), INVALID_RLE),
        (lambda d: rle_counts(d, [4000, 96, 1]), INVALID_RLE),
        (lambda d: rle_counts(d, [4100, -4]), INVALID_RLE),
        (lambda d: rle_counts(d, 4096), INVALID_RLE),
        (lambda d: d.pop("categories"), "no 'categories' list (not a COCO instances file)"),
    ],
)
def test_bad_annotation_files_end_in_one_line(tmp_path, change, message):
    image_dir, ann = broken(tmp_path, change)
    with pytest.raises(UserError) as e:
        CocoInstances(image_dir, ann, train=True)
    text = str(e.value)
    assert text == f"{ann}: {message}" and "\n" not in text


def test_missing_annotation_file_and_bad_json(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        CocoInstances(tmp_path, tmp_path / "none.json", train=True)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        CocoInstances(tmp_path, tmp_path / "bad.json", train=True)


def test_draw_tints_masks_and_outlines_boxes_above_the_threshold():
    from maskrcnn.detect import PALETTE, draw

    image = Image.new("RGB", (40, 30), (0, 0, 0))
    masks = torch.zeros(2, 1, 30, 40)
    masks[0, 0, 10:29, 10:20] = 0.9
    masks[1, 0, 0:5, 0:5] = 0.9
    output = {
        "boxes": torch.tensor([[8.0, 8.0, 22.0, 29.0], [0.0, 0.0, 6.0, 6.0]]),
        "labels": torch.tensor([1, 2]),
        "scores": torch.tensor([0.9, 0.2]),
        "masks": masks,
    }
    pixels = np.asarray(draw(image, output, {1: "square"}, threshold=0.5))
    tint = tuple(int(0.45 * c) for c in PALETTE[1])  # blended in float, then truncated
    assert tuple(pixels[26, 15]) == tint  # inside the kept mask, below its label
    assert tuple(pixels[2, 2]) == (0, 0, 0)  # the detection below the threshold is not drawn
    assert tuple(pixels[8, 15]) == PALETTE[1]  # the box outline
