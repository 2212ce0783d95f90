"""Decode every image of an image folder once, before training reads it.

    python -m zoo.imagenet_loaders.verify --data-dir /data/imagenet            # train and val; writes manifest.json
    python -m zoo.imagenet_loaders.verify --data-dir /data/imagenet --splits val

``scripts/download_data.sh --verify`` runs this. Each image that decodes is entered in the data
directory's ``manifest.json`` (zoo.manifest: size and modification time); a corrupt one is a
one-line error naming it, and no manifest is written. ``train.py`` checks the validation split the
same way before its first epoch (images the manifest vouches for are not decoded again), so a bad
validation image ends the run at start-up, not after an epoch of training.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time

from zoo.cli import entry_point
from zoo.errors import UserError, one_line
from zoo.imagenet_loaders.folder import DataError, check_layout, list_samples
from zoo.manifest import DataManifest

# Decoding is CPU work in PIL (which releases the GIL while it decodes): threads keep every core busy.
DEFAULT_WORKERS = min(32, os.cpu_count() or 1)


def _decode(path: str) -> str | None:
    """None when ``path`` decodes as an RGB image, else the reason in one line."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.convert("RGB").load()
        return None
    except Exception as e:  # noqa: BLE001 - PIL raises many types for a bad file; each means "corrupt"
        return one_line(e)


def unverified(data_dir, split: str, classes: list[str], manifest: DataManifest) -> list[str]:
    """The images of ``data_dir/split`` that ``manifest`` does not vouch for (new or changed)."""
    import pathlib

    samples = list_samples(pathlib.Path(data_dir) / split, classes)
    return [path for path, _ in samples if manifest.lookup(path) is None]


def check_images(
    paths: list[str], *, workers: int = DEFAULT_WORKERS, what: str = "images", manifest=None
) -> None:
    """Decode ``paths``; DataError naming the first that fails. Each good one is entered in
    ``manifest`` when one is given. Prints progress for long lists."""
    started, done = time.time(), 0
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        for path, problem in zip(paths, pool.map(_decode, paths, chunksize=64), strict=True):
            if problem is not None:
                raise DataError(f"corrupt or unreadable image {path}: {problem}")
            if manifest is not None:
                manifest.record(path, decoded=True)
            done += 1
            if done % 10000 == 0:
                rate = done / max(time.time() - started, 1e-9)
                print(
                    f"checked {done}/{len(paths)} {what} ({rate:.0f} images/s)", file=sys.stderr, flush=True
                )


def check_split(data_dir, split: str, classes: list[str], *, workers: int = DEFAULT_WORKERS) -> int:
    """Decode the images of one split the data directory's manifest does not vouch for; returns how
    many were decoded. Reads the manifest, never writes it (training leaves the data directory alone)."""
    paths = unverified(data_dir, split, classes, DataManifest.read(data_dir))
    check_images(paths, workers=workers, what=f"{split} images")
    return len(paths)


def verify(data_dir, splits=("train", "val"), *, workers: int = DEFAULT_WORKERS) -> DataManifest:
    """Decode every image of ``splits`` not yet vouched for and write the manifest (only when all decode)."""
    classes = check_layout(data_dir, splits=splits)
    manifest = DataManifest.read(data_dir)
    for split in splits:
        paths = unverified(data_dir, split, classes, manifest)
        print(f"{split}: decoding {len(paths)} images", file=sys.stderr, flush=True)
        check_images(paths, workers=workers, what=f"{split} images", manifest=manifest)
    manifest.write()
    return manifest


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m zoo.imagenet_loaders.verify", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--data-dir", default=os.environ.get("DATA_DIR"), help="image folder root ($DATA_DIR)")
    p.add_argument("--splits", default="train,val", help="comma list of split folders (default train,val)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="decoding threads")
    a = p.parse_args(argv)
    if a.workers < 1:
        raise UserError(f"--workers must be a positive integer, not {a.workers}")
    manifest = verify(a.data_dir, tuple(s for s in a.splits.split(",") if s), workers=a.workers)
    print(f"every image decodes; {len(manifest.files)} files recorded in {manifest.path}")


if __name__ == "__main__":
    main()
