"""Download and lay out COCO 2017 for detection, or write the generated shapes set instead.

    python -m ssd.download --data-dir /data/coco                 # train + val images, annotations (~19 GB)
    python -m ssd.download --data-dir /data/coco --splits val    # val2017 + annotations only (~1 GB)
    python -m ssd.download --data-dir /tmp/shapes --synthetic    # small generated COCO-format set

Result: <data-dir>/train2017/*.jpg, <data-dir>/val2017/*.jpg, <data-dir>/annotations/instances_*.json.
Downloads resume from a ``.part`` file (HTTP Range), are checked against the published size and MD5,
and each folder is extracted beside its final place and renamed into it, so an interrupted run
leaves nothing half-made behind.
"""

from __future__ import annotations

import argparse
import os

from zoo.cli import entry_point
from zoo.data.coco import BASE_URL, prepare_coco


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m ssd.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="where train2017/, val2017/, annotations/ go ($DATA_DIR)",
    )
    p.add_argument("--splits", default="train,val", help="comma list of train, val (annotations always)")
    p.add_argument("--base-url", default=BASE_URL, help="mirror of images.cocodataset.org")
    p.add_argument("--delete-zips", action="store_true", help="remove each archive once extracted")
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="write the generated shapes set (train2017/val2017 layout) instead of COCO",
    )
    p.add_argument("--synthetic-images", type=int, default=256, help="training images of the shapes set")
    a = parse_args(p, argv)
    if not a.data_dir:
        raise SystemExit("error: give --data-dir (or set DATA_DIR): the folder COCO goes into")
    if a.synthetic:
        from ssd.shapes import make_shapes_coco

        n = a.synthetic_images
        make_shapes_coco(a.data_dir, images=n, split="train2017", seed=0)
        make_shapes_coco(a.data_dir, images=max(1, n // 4), split="val2017", seed=1)
        print(f"shapes set ({n} + {max(1, n // 4)} images) in {a.data_dir}")
        return
    splits = tuple(s for s in a.splits.split(",") if s)
    out = prepare_coco(a.data_dir, splits, base_url=a.base_url, keep_zips=not a.delete_zips)
    print(f"COCO 2017 ({', '.join(splits)}) ready in {out}")


if __name__ == "__main__":
    main()
