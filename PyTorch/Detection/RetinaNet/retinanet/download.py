"""Download and prepare RetinaNet's data in COCO format.

    python -m retinanet.download --data-dir /data/openimages-mlperf              # MLPerf subset (~1.8 M images)
    python -m retinanet.download --data-dir /data/oi --max-images 500            # a trial: 500 images a split
    python -m retinanet.download --data-dir /data/coco --dataset coco            # COCO 2017 (~19 GB)
    python -m retinanet.download --data-dir /tmp/digits --synthetic              # the small digits set

OpenImages-MLPerf (retinanet.openimages): ``train/``, ``validation/``, ``annotations/instances_<split>.json``
(the MLPerf recipe's splits). COCO 2017 through zoo.data.coco (resumed, size and MD5 checked):
``train2017/``, ``val2017/``, ``annotations/``. ``--synthetic``: scikit-learn's handwritten digits on
canvases with their boxes (retinanet.digits), in COCO's layout.
"""

from __future__ import annotations

import argparse
import os

from zoo.cli import entry_point
from zoo.errors import UserError

from retinanet.openimages import CSV_BASE, IMAGE_BASE


@entry_point
def main(argv=None) -> None:
    from zoo.cli import parse_args

    p = argparse.ArgumentParser(
        prog="python -m retinanet.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data-dir", default=os.environ.get("DATA_DIR"), help="where the data goes ($DATA_DIR)")
    p.add_argument("--dataset", choices=("openimages-mlperf", "coco"), default="openimages-mlperf")
    p.add_argument("--splits", help="comma list (openimages: train,validation; coco: train,val)")
    p.add_argument("--max-images", type=int, help="openimages: at most this many images a split (a trial)")
    p.add_argument("--csv-base-url", default=CSV_BASE, help="mirror of OpenImages' csv files")
    p.add_argument("--image-base-url", default=IMAGE_BASE, help="mirror of OpenImages' images")
    p.add_argument("--workers", type=int, default=16, help="parallel image downloads")
    p.add_argument("--synthetic", action="store_true", help="write the digits detection set instead")
    p.add_argument("--synthetic-images", type=int, default=256, help="training images of the digits set")
    a = parse_args(p, argv)
    if not a.data_dir:
        raise UserError("give --data-dir (or set DATA_DIR): the folder the data goes into")
    if a.max_images is not None and a.max_images < 1:
        raise UserError(f"--max-images must be a positive integer, not {a.max_images}")
    if a.synthetic:
        from retinanet.digits import make_digits_coco

        make_digits_coco(a.data_dir, images=a.synthetic_images)
        print(f"digits detection set in {a.data_dir}")
    elif a.dataset == "coco":
        from zoo.data.coco import prepare_coco

        splits = tuple(s for s in (a.splits or "train,val").split(",") if s)
        print(f"COCO 2017 ready in {prepare_coco(a.data_dir, splits)}")
    else:
        from retinanet.openimages import prepare_openimages

        splits = tuple(s for s in (a.splits or "train,validation").split(",") if s)
        root = prepare_openimages(
            a.data_dir, splits, csv_base=a.csv_base_url, image_base=a.image_base_url, max_images=a.max_images,
            workers=a.workers,
        )  # fmt: skip
        print(f"OpenImages-MLPerf ({', '.join(splits)}) ready in {root}")


if __name__ == "__main__":
    main()
