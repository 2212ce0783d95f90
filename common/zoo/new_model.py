"""A new model directory from the skeleton (common/templates/pytorch), written in the zoo's one shape.

    python -m zoo.new_model PyTorch/Classification/MyNet --package mynet      (make new-model NAME=... PACKAGE=...)

Copies the skeleton to the given <Framework>/<Domain>/<Model> directory with its package renamed, so
that the new model trains, evaluates, exports and serves as generated, and its tests pass; then the
model's own network, data and recipes replace the skeleton's (CONTRIBUTING.md walks through it).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import tempfile

from zoo.cli import entry_point
from zoo.errors import UserError

TEMPLATE = pathlib.Path(__file__).resolve().parents[1] / "templates" / "pytorch"
TEMPLATE_PACKAGE, TEMPLATE_NAME = "skeleton", "Skeleton"
DOMAINS = ("Classification", "Detection", "Segmentation", "LanguageModeling", "Translation", "Recommendation",
           "SpeechSynthesis", "SpeechRecognition")  # fmt: skip


def new_model(target, package: str) -> pathlib.Path:
    """Write the skeleton into ``target`` (which must not exist) with package ``package``; returns it."""
    target = pathlib.Path(target)
    parts = target.parts[-3:]
    if len(parts) != 3 or parts[0] != "PyTorch" or parts[1] not in DOMAINS:
        raise UserError(f"{target} is not PyTorch/<Domain>/<Model> with a domain of: {', '.join(DOMAINS)}")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", package) or package == TEMPLATE_PACKAGE:
        raise UserError(
            f"package {package!r} must be a lower-case Python name other than {TEMPLATE_PACKAGE!r}"
        )
    if target.exists():
        raise UserError(f"{target} already exists")
    name = parts[2]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        for source in sorted(TEMPLATE.rglob("*")):
            if "__pycache__" in source.parts or source.is_dir():
                continue
            relative = (
                source.relative_to(TEMPLATE).as_posix().replace(f"{TEMPLATE_PACKAGE}/", f"{package}/", 1)
            )
            dest = staging / relative
            dest.parent.mkdir(parents=True, exist_ok=True)
            text = source.read_text()
            text = text.replace(TEMPLATE_PACKAGE, package).replace(TEMPLATE_NAME, name)
            dest.write_text(text)
            shutil.copymode(source, dest)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m zoo.new_model", description=__doc__.split("\n")[0])
    p.add_argument("directory", help="PyTorch/<Domain>/<Model>, e.g. PyTorch/Classification/MyNet")
    p.add_argument("--package", required=True, help="the model's Python package, e.g. mynet")
    args = p.parse_args(argv)
    target = new_model(args.directory, args.package)
    print(f"wrote {target}: next, CONTRIBUTING.md's 'Adding a model' (its README row, bad-input rows, tests)")


if __name__ == "__main__":
    main()
