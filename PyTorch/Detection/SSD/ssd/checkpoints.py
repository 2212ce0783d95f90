"""Turn a downloaded NGC SSD300 checkpoint into this model's ``model.pt``.

Pull it first (``scripts/download_checkpoint.sh pull ngc-ssd300-amp-20.06`` prints its path), then::

    python -m ssd.checkpoints convert-ngc NGC_FILE results/ngc_model.pt
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.cli import entry_point
from zoo.errors import UserError, one_line


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m ssd.checkpoints",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = p.add_subparsers(dest="command", required=True)
    convert = commands.add_parser(
        "convert-ngc", help="write an NGC SSD300 checkpoint as this model's model.pt"
    )
    convert.add_argument("source", help="the pulled nvidia_ssdpyt_*.pt")
    convert.add_argument("output", help="model.pt to write (atomically)")
    args = p.parse_args(argv)
    if not Path(args.source).is_file():
        raise UserError(f"{args.source} does not exist")
    convert_ngc_file(args.source, args.output)
    print(args.output)


def convert_ngc_file(src, dest) -> None:
    """NGC ``nvidia_ssdpyt_*.pt`` -> a ``model.pt`` that evaluate/detect/export read (COCO's 80 classes)."""
    import torch
    from zoo.io import atomic_write

    from ssd.model import COCO_CATEGORY_IDS, SSD300, convert_ngc_state

    try:
        state = torch.load(src, map_location="cpu", weights_only=True)
        converted = convert_ngc_state(state)
        model = SSD300(num_classes=len(COCO_CATEGORY_IDS) + 1)
        model.load_state_dict(converted)
    except Exception as e:  # noqa: BLE001 - unpickling and layout problems read the same to a user
        reason = one_line(e)
        raise UserError(f"cannot convert {src}: {reason[:200]}") from None
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(dest) as tmp:
        torch.save(
            {
                "model": model.state_dict(),
                "category_ids": COCO_CATEGORY_IDS,
                "category_names": {},
                "num_classes": len(COCO_CATEGORY_IDS) + 1,
            },
            tmp,
        )


if __name__ == "__main__":
    main()
