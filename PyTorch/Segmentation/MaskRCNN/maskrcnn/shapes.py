"""A small generated instance-segmentation set: coloured shapes on a plain background, written as PNG
images plus a COCO-format annotation file whose masks are exactly the drawn pixels. Squares carry
polygon segmentations, discs and triangles compressed RLE (both forms COCO uses). Used by the tests
and by ``download_data.sh --synthetic``.

    python -m maskrcnn.shapes --out /tmp/shapes --images 64
"""

from __future__ import annotations

import functools

from zoo.cli import entry_point
from zoo.coco import SHAPE_CLASSES as CLASSES
from zoo.coco import SHAPE_COLOURS as COLOURS
from zoo.coco import make_shapes_coco as _make_shapes_coco
from zoo.coco import shapes_main

__all__ = ["CLASSES", "COLOURS", "make_shapes_coco"]

# ``make_shapes_coco(root, images=32, size=128, max_objects=3, seed=0, split="train")``: PNGs, exact masks.
make_shapes_coco = functools.partial(_make_shapes_coco, size=128, masks=True)


@entry_point
def main(argv=None) -> None:
    shapes_main(argv, description=__doc__, masks=True, size=128, splits=("train2017", "val2017"))


if __name__ == "__main__":
    main()
