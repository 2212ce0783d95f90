"""Pull a pretrained checkpoint named in a registry YAML (default: this model's checkpoints.yaml).

python -m ssd.checkpoints --list
python -m ssd.checkpoints resnet50-torchvision-v1 --registry ../../Classification/ResNet50/checkpoints.yaml
"""

from __future__ import annotations

import argparse
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    from zoo.checkpoints import CheckpointError, fetch, load_registry

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="checkpoint name")
    p.add_argument("--registry", default=str(MODEL_DIR / "checkpoints.yaml"))
    p.add_argument("--list", action="store_true", help="list the registry's names")
    p.add_argument(
        "--convert-ngc", metavar="OUT", help="write an NGC SSD300 checkpoint as this model's model.pt"
    )
    a = p.parse_args(argv)
    if not Path(a.registry).is_file():
        raise SystemExit(f"registry {a.registry} does not exist")
    try:
        registry = load_registry(a.registry)
        if a.list or not a.name:
            for e in registry.entries():
                print(f"{e.name:32s} {e.description}")
            return
        path = fetch(registry.get(a.name))
    except CheckpointError as e:
        raise SystemExit(str(e)) from None
    if a.convert_ngc:
        convert_ngc_file(path, a.convert_ngc)
        path = a.convert_ngc
    print(path)


def convert_ngc_file(src, dest) -> None:
    """NGC ``nvidia_ssdpyt_*.pt`` -> a ``model.pt`` that evaluate/detect/export read (COCO's 80 classes)."""
    import torch
    from zoo.checkpoints import atomic_write

    from ssd.model import COCO_CATEGORY_IDS, SSD300, convert_ngc_state

    try:
        state = torch.load(src, map_location="cpu", weights_only=True)
        converted = convert_ngc_state(state)
        model = SSD300(num_classes=len(COCO_CATEGORY_IDS) + 1)
        model.load_state_dict(converted)
    except Exception as e:  # noqa: BLE001 - unpickling and layout problems read the same to a user
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SystemExit(f"cannot convert {src}: {reason[:200]}") from None
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
