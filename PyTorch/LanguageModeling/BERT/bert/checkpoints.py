"""Pull pretrained checkpoints listed in checkpoints.yaml into the cache (zoo.checkpoints)."""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

REGISTRY = Path(__file__).resolve().parents[1] / "checkpoints.yaml"


def main(argv=None) -> None:
    from zoo.checkpoints import CheckpointError, fetch, load_registry

    p = argparse.ArgumentParser(prog="python -m bert.checkpoints", description=__doc__.splitlines()[0])
    p.add_argument("name", nargs="?", help="checkpoint name (see --list)")
    p.add_argument("--list", action="store_true", help="list the known checkpoints")
    p.add_argument("--cache-dir", help="default: $ZOO_CACHE or ~/.cache/zoo/checkpoints")
    p.add_argument("--registry", default=str(REGISTRY))
    args = p.parse_args(argv)
    try:
        registry = load_registry(args.registry)
        if args.list or not args.name:
            for entry in registry.entries():
                print(f"{entry.name:<36} {entry.model:<11} {entry.format:<15} {entry.description}")
            return
        entry = registry.get(args.name)
        path = fetch(entry, cache_dir=args.cache_dir)
    except CheckpointError as e:
        raise SystemExit(str(e)) from None
    if entry.format == "tf-zip":
        out = path.with_suffix("")
        if not out.is_dir():
            with zipfile.ZipFile(path) as z:
                z.extractall(out.parent / (out.name + ".tmp"))
            (out.parent / (out.name + ".tmp")).replace(out)
        ckpts = sorted(out.rglob("bert_model.ckpt.index"))
        path = ckpts[0].with_suffix("") if ckpts else out
    print(path)


if __name__ == "__main__":
    main()
