"""Download and lay out COCO 2017 for instance segmentation, or write the generated shapes set instead.

    python -m maskrcnn.download --data-dir /data/coco                 # train + val images, annotations (~19 GB)
    python -m maskrcnn.download --data-dir /data/coco --splits val    # val2017 + annotations only (~1 GB)
    python -m maskrcnn.download --data-dir /tmp/shapes --synthetic    # small generated COCO-format set

Result: <data-dir>/train2017/*.jpg, <data-dir>/val2017/*.jpg, <data-dir>/annotations/instances_*.json
(polygon and RLE segmentations). Downloads resume from a ``.part`` file (HTTP Range, zoo.checkpoints),
are checked against the published size and MD5, and each folder is extracted beside its final place
and renamed into it, so an interrupted run leaves nothing half-made behind. The annotation files are
checked as training reads them (a bad one ends in one line naming the annotation).
"""

from __future__ import annotations

from zoo.cli import entry_point
from zoo.coco import download_main


@entry_point
def main(argv=None) -> None:
    download_main(
        argv,
        prog="python -m maskrcnn.download",
        description=__doc__,
        masks=True,
        size=128,
        synthetic_images=64,
    )


if __name__ == "__main__":
    main()
