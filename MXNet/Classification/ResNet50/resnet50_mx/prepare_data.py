"""Turn an image-folder dataset (``train/<class>/*.jpg``, ``val/<class>/*.jpg``) into RecordIO.

Writes ``<out>/train.rec|idx``, ``<out>/val.rec|idx``, ``<out>/classes.txt`` and, once every packed
image has been decoded back (records.verify_dataset), ``<out>/manifest.json``: runs trust the files it
lists and skip their decode pass. ``--verify`` does that last step alone for a folder made elsewhere. Packing is done by
``im2rec`` as shipped in the MXNet wheel (``mxnet/tools/im2rec.py``); the image lists are written here so
that class ids follow the sorted class-folder names of ``train/`` for both splits.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from zoo.cli import entry_point, parse_args
from zoo.errors import UserError

from .records import verify_dataset

IMAGE_EXTS = (".jpg", ".jpeg", ".png")


def im2rec_script() -> Path:
    import mxnet

    path = Path(mxnet.__file__).parent / "tools" / "im2rec.py"
    if not path.is_file():
        raise UserError(f"im2rec not found in the MXNet install ({path})")
    return path


def list_split(split_dir: Path, classes: list[str], seed: int) -> list[tuple[int, str]]:
    """(label, relative path) of every image of one split, shuffled once with ``seed``."""
    items = []
    for label, name in enumerate(classes):
        class_dir = split_dir / name
        if not class_dir.is_dir():
            continue
        for path in sorted(class_dir.iterdir()):
            if path.suffix.lower() in IMAGE_EXTS and path.is_file():
                items.append((label, f"{name}/{path.name}"))
    unknown = sorted(p.name for p in split_dir.iterdir() if p.is_dir() and p.name not in classes)
    if unknown:
        raise UserError(f"{split_dir} has class folders not in train/: {', '.join(unknown[:5])}")
    if not items:
        raise UserError(f"{split_dir} holds no images ({', '.join(IMAGE_EXTS)})")
    random.Random(seed).shuffle(items)
    return items


def undecodable(split_dir: Path, items) -> list[str]:
    """The images OpenCV (what im2rec uses) cannot decode, as paths relative to ``split_dir``."""
    import cv2

    return [rel for _, rel in items if cv2.imread(str(split_dir / rel)) is None]


def pack_split(
    split_dir: Path, out_dir: Path, split: str, items, *, resize: int, quality: int, threads: int
) -> int:
    """Write <out>/<split>.lst, then pack it into <split>.rec/.idx with im2rec; returns the record count."""
    work = out_dir / f".{split}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with open(work / f"{split}.lst", "w") as f:
        for i, (label, rel) in enumerate(items):
            f.write(f"{i}\t{label}\t{rel}\n")
    cmd = [
        sys.executable,
        str(im2rec_script()),
        str(work / split),
        str(split_dir),
        "--quality",
        str(quality),
        "--num-thread",
        str(threads),
        "--resize",
        str(resize),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    idx = work / f"{split}.idx"
    count = sum(1 for _ in open(idx)) if idx.is_file() else 0
    if proc.returncode != 0 or count != len(items) or "imread read blank" in log or "pack_img error" in log:
        shutil.rmtree(work, ignore_errors=True)
        bad = undecodable(split_dir, items)
        if bad:
            raise UserError(
                f"{len(bad)} image(s) in {split_dir} could not be decoded (first: {bad[0]}); fix or remove them"
            )
        last = (log.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise UserError(f"im2rec failed on {split_dir}: {last}")
    for ext in ("rec", "idx", "lst"):
        os.replace(work / f"{split}.{ext}", out_dir / f"{split}.{ext}")
    work.rmdir()
    return count


def convert(
    image_folder, out_dir, *, resize: int = 0, quality: int = 95, threads: int = 2, seed: int = 0
) -> dict:
    """Convert ``image_folder/{train,val}`` to RecordIO in ``out_dir``; returns records per split."""
    root, out = Path(image_folder), Path(out_dir)
    if not root.is_dir():
        raise UserError(f"image folder {root} does not exist")
    if not (root / "train").is_dir():
        raise UserError(f"image folder {root} has no train/ folder")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if not classes:
        raise UserError(f"{root / 'train'} has no class folders")
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "val"):
        if not (root / split).is_dir():
            if split == "val":
                print(f"no {root / 'val'}: only train.rec written", file=sys.stderr)
                continue
        items = list_split(root / split, classes, seed)
        counts[split] = pack_split(
            root / split, out, split, items, resize=resize, quality=quality, threads=threads
        )
        print(f"{split}: {counts[split]} images -> {out / (split + '.rec')}", file=sys.stderr)
    (out / "classes.txt").write_text("\n".join(classes) + "\n")
    verify_dataset(out, threads=threads)
    return counts


@entry_point
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="download_data.sh",
        description="Prepare ImageNet (or any image-folder dataset) as RecordIO for ResNet-50 in MXNet.",
    )
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--image-folder", help="folder with train/<class>/*.jpg and val/<class>/*.jpg")
    src.add_argument(
        "--imagenet-tars",
        nargs=3,
        metavar=("TRAIN_TAR", "VAL_TAR", "DEVKIT_TAR"),
        help="the official ILSVRC2012 tarballs (you download them: the licence requires it)",
    )
    src.add_argument("--digits", action="store_true", help="scikit-learn's digits as a small real dataset")
    src.add_argument("--synthetic", action="store_true", help="nothing to prepare: train with synthetic data")
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR", "data/recordio"),
        help="output folder for train/val .rec/.idx, what train.sh reads ($DATA_DIR, else data/recordio)",
    )
    parser.add_argument(
        "--resize", type=int, default=None, help="shorter side stored (default 256; 0 keeps the original)"
    )
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality of the stored images")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="im2rec worker processes")
    parser.add_argument("--image-size", type=int, default=32, help="--digits: image side")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="alone: decode every image of DATA_DIR's .rec files and write manifest.json, which runs trust "
        "(preparing does this too)",
    )
    args = parse_args(parser, argv, renamed={"--out": "--data-dir"})
    for flag in ("threads", "image_size", "quality"):
        if getattr(args, flag) < 1:
            raise UserError(
                f"--{flag.replace('_', '-')} must be a positive integer, not {getattr(args, flag)}"
            )
    if not (args.image_folder or args.imagenet_tars or args.digits or args.synthetic):
        if not args.verify:
            parser.error("give one of --image-folder, --imagenet-tars, --digits, --synthetic or --verify")
        verify_dataset(args.data_dir, threads=args.threads)
        return
    if args.synthetic:
        print("synthetic data needs no preparation: scripts/train.sh --data-backend synthetic")
        return
    resize = 256 if args.resize is None else args.resize
    out = Path(args.data_dir)
    if args.imagenet_tars:
        from zoo.data.imagenet import prepare_imagenet

        folder = prepare_imagenet(*args.imagenet_tars, out / "image-folder")
    elif args.digits:
        from zoo.data.datasets import make_digits_imagefolder

        folder = make_digits_imagefolder(out / "image-folder", image_size=args.image_size)
        resize = 0 if args.resize is None else args.resize
    else:
        folder = Path(args.image_folder)
    convert(folder, out, resize=resize, quality=args.quality, threads=args.threads)


if __name__ == "__main__":
    main()
