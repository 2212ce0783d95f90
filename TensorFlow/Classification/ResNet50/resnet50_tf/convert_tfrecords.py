"""Convert an ImageNet-style folder (train/<class>/*.JPEG, val/<class>/*.JPEG) into TFRecord shards.

Every image is decoded once to check it (a corrupt file stops the conversion with its path) and is
stored as JPEG (PNG, CMYK or grey images are re-encoded as RGB JPEG). Labels follow the sorted class
folder names of train/. Each shard is written to a temporary name and renamed when complete, so an
interrupted conversion can be re-run and skips the shards that are already there. Last, every shard
is read back and decoded (tfrecords.verify_dataset) and listed in ``manifest.json``, which runs trust.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from zoo.cli import entry_point, parse_args
from zoo.errors import UserError, one_line

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp"}


def list_images(split_dir: Path, classes: list[str]) -> list[tuple[str, int]]:
    items = []
    for label, name in enumerate(classes):
        folder = split_dir / name
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix.lower() in IMAGE_EXTENSIONS:
                items.append((str(path), label))
    return items


def _jpeg_bytes(path: str) -> tuple[bytes, int, int]:
    from PIL import Image

    with open(path, "rb") as f:
        data = f.read()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as e:  # PIL raises many types for bad files
        raise UserError(f"corrupt or unreadable image {path}: {one_line(e)}") from None
    if image.format != "JPEG" or image.mode != "RGB":
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG", quality=95)
        data = buffer.getvalue()
    return data, image.height, image.width


def _example(path: str, label: int, synset: str):
    import tensorflow as tf

    data, height, width = _jpeg_bytes(path)

    def b(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    features = {
        "image/encoded": b(data),
        "image/format": b(b"JPEG"),
        "image/class/label": i(label),
        "image/class/synset": b(synset.encode()),
        "image/height": i(height),
        "image/width": i(width),
        "image/filename": b(os.path.basename(path).encode()),
    }
    return tf.train.Example(features=tf.train.Features(feature=features))


def write_shard(out_path: str, items: list[tuple[str, int]], classes: list[str]) -> int:
    import tensorflow as tf

    if os.path.exists(out_path):
        return len(items)
    tmp = out_path + ".tmp"
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for path, label in items:
                writer.write(_example(path, label, classes[label]).SerializeToString())
    except BaseException:
        os.remove(tmp)  # never leave a partial shard behind
        raise
    os.replace(tmp, out_path)
    return len(items)


def convert(src: Path, out: Path, train_shards: int, val_shards: int, workers: int, seed: int = 0) -> dict:
    import random

    from resnet50_tf.tfrecords import verify_dataset

    train_dir, val_dir = src / "train", src / "val"
    for d in (train_dir, val_dir):
        if not d.is_dir():
            raise UserError(f"{src} has no {d.name}/ folder (expected train/<class>/*, val/<class>/*)")
    classes = sorted(p.name for p in train_dir.iterdir() if p.is_dir())
    if not classes:
        raise UserError(f"{train_dir} has no class folders")
    unknown = sorted(p.name for p in val_dir.iterdir() if p.is_dir() and p.name not in classes)
    if unknown:
        raise UserError(f"{val_dir} has class folders missing from train/: {unknown[:5]}")
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, split_dir, shards, shuffle in (
        ("train", train_dir, train_shards, True),
        ("validation", val_dir, val_shards, True),
    ):
        items = list_images(split_dir, classes)
        if not items:
            raise UserError(f"{split_dir} has no images")
        if shuffle:  # mix classes within and across shards; training shuffles again per epoch
            random.Random(seed).shuffle(items)
        shards = max(1, min(shards, len(items)))
        jobs = []
        for k in range(shards):
            part = items[k * len(items) // shards : (k + 1) * len(items) // shards]
            jobs.append((str(out / f"{split}-{k:05d}-of-{shards:05d}"), part, classes))
        start, done = time.time(), 0
        pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
        for n in (pool.map if pool else map)(write_shard, *zip(*jobs, strict=True)):
            done += n
            rate = done / max(time.time() - start, 1e-6)
            print(f"\r{split}: {done}/{len(items)} images, {rate:.0f} img/s", end="", file=sys.stderr)
        if pool:
            pool.shutdown()
        print(file=sys.stderr)
        counts[split] = len(items)
    info = {
        "classes": classes,
        "train_examples": counts["train"],
        "validation_examples": counts["validation"],
        "label_offset": 0,
        "source": str(src),
    }
    tmp = out / "dataset.json.tmp"
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, out / "dataset.json")
    verify_dataset(out)  # every record read back and decoded once: manifest.json, which runs trust
    return info


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="convert_tfrecords.sh",
        description="Convert an ImageNet-style folder (train/<class>/*, val/<class>/*) into TFRecord shards.",
    )
    parser.add_argument("--src", required=True, help="folder with train/ and val/ class sub-folders")
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="output folder for the TFRecord shards and dataset.json: what train.sh --data-dir reads ($DATA_DIR)",
    )
    parser.add_argument("--train-shards", type=int, default=1024)
    parser.add_argument("--val-shards", type=int, default=128)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the order of training images in shards")
    args = parse_args(parser, argv, renamed={"--out": "--data-dir"})
    if not args.data_dir:
        raise UserError("--data-dir (or $DATA_DIR) is required: the folder to write the TFRecords to")
    if args.train_shards < 1 or args.val_shards < 1:
        raise UserError("--train-shards and --val-shards must be >= 1")
    src = Path(args.src)
    if not src.is_dir():
        raise UserError(f"source folder {src} does not exist")
    info = convert(src, Path(args.data_dir), args.train_shards, args.val_shards, args.workers, args.seed)
    print(
        f"wrote {info['train_examples']} train and {info['validation_examples']} validation images "
        f"of {len(info['classes'])} classes to {args.data_dir}"
    )


if __name__ == "__main__":
    main()
