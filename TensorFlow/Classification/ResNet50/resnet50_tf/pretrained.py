"""Pull a pretrained checkpoint by name from the model's registry (checkpoints.yaml) via zoo.checkpoints.

    python -m resnet50_tf.pretrained --list
    python -m resnet50_tf.pretrained keras-applications-resnet50-v1-imagenet

The file is downloaded with resume, checked against the registry's size and sha256, and moved into
the cache ($ZOO_CACHE or ~/.cache/zoo/checkpoints) only when verified; its path is printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

REGISTRY = Path(__file__).resolve().parents[1] / "checkpoints.yaml"


def main(argv=None) -> Path | None:
    p = argparse.ArgumentParser(
        prog="download_checkpoint.sh",
        description="Download a pretrained checkpoint by name (verified, cached).",
    )
    p.add_argument("name", nargs="?", help="checkpoint name (--list shows them)")
    p.add_argument("--list", action="store_true", help="list the registry")
    p.add_argument("--registry", default=str(REGISTRY))
    p.add_argument("--cache-dir", help="default: $ZOO_CACHE or ~/.cache/zoo/checkpoints")
    args = p.parse_args(argv)
    from zoo.checkpoints import CheckpointError, fetch, load_registry

    try:
        registry = load_registry(args.registry)
        if args.list or not args.name:
            for entry in registry.entries():
                print(f"{entry.name:45s} {entry.format:10s} {entry.description}")
            return None
        path = fetch(registry.get(args.name), cache_dir=args.cache_dir)
    except CheckpointError as e:
        raise SystemExit(str(e)) from None
    print(path)
    return path


if __name__ == "__main__":
    main()
