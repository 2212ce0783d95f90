"""A small generated detection set: coloured shapes with known boxes on backgrounds of random colours,
written as images plus a COCO-format annotation file (zoo.coco.make_shapes_coco). Used by the tests
and the quick-start smoke run.

    python -m ssd.shapes --out /tmp/shapes --images 64
"""

from __future__ import annotations

import functools

from zoo.cli import entry_point
from zoo.coco import SHAPE_CLASSES as CLASSES
from zoo.coco import SHAPE_COLOURS as COLOURS
from zoo.coco import make_shapes_coco as _make_shapes_coco
from zoo.coco import shapes_main

__all__ = ["CLASSES", "COLOURS", "make_shapes_coco"]

# ``make_shapes_coco(root, images=32, size=160, max_objects=3, seed=0, split="train")``: JPEGs, boxes.
make_shapes_coco = functools.partial(_make_shapes_coco, size=160, masks=False)


@entry_point
def main(argv=None) -> None:
    shapes_main(argv, description=__doc__, masks=False, size=160)


if __name__ == "__main__":
    main()
