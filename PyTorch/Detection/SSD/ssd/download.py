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

from zoo.cli import entry_point
from zoo.coco import download_main


@entry_point
def main(argv=None) -> None:
    download_main(
        argv, prog="python -m ssd.download", description=__doc__, masks=False, size=160, synthetic_images=256
    )


if __name__ == "__main__":
    main()
