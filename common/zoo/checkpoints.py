"""The pretrained-checkpoint registry: entries, their preprocessing and published accuracy, and a fetch
into the cache (zoo.io.download: resumed, verified, moved into place only when whole).

A registry is a YAML file beside each model (``checkpoints.yaml``)::

    checkpoints:
      - name: torchvision-imagenet1k-v2
        url: https://download.pytorch.org/models/resnet50-11ad3fa6.pth
        sha256: 11ad3fa6          # full digest, or a prefix of >= 8 hex characters; null if none is published
        size: null                # bytes, or null
        format: pytorch           # one of zoo.io.FORMATS: what the file must look like
        framework: pytorch
        model: resnet50
        description: torchvision ResNet50_Weights.IMAGENET1K_V2
        source: https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html
        preprocessing: {resize: 232, crop: 224, interpolation: bilinear,
                        mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
        accuracy: {top1: 80.858, top5: 95.434, dataset: imagenet-1k val}

``preprocessing`` (optional) is how the published accuracy was measured: resize the short side to
``resize`` with ``interpolation``, centre-crop ``crop``, scale to 0..1, subtract ``mean`` and divide
by ``std`` (RGB). ``accuracy`` (optional) is the published quality: ``dataset`` and one or more of
ACCURACY_METRICS. Unknown fields are errors.

An entry without ``sha256`` is checked for its format's signature before it is cached (an HTML
error page served with HTTP 200 is refused). From the shell::

    python -m zoo.checkpoints --registry checkpoints.yaml list
    python -m zoo.checkpoints --registry checkpoints.yaml pull NAME [--cache-dir DIR]
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
from dataclasses import dataclass

from zoo.cli import entry_point
from zoo.errors import UserError, one_line
from zoo.io import FORMATS, DownloadError, download, is_sha256_prefix


class CheckpointError(UserError):
    """A one-line reason a checkpoint could not be fetched, verified or read."""


INTERPOLATIONS = ("nearest", "bilinear", "bicubic")
# Published quality metrics an entry may quote, with their valid range (percent, or COCO mAP in 0..1).
ACCURACY_METRICS = {"top1": 100.0, "top5": 100.0, "f1": 100.0, "exact_match": 100.0, "map": 1.0}


@dataclass(frozen=True)
class Preprocessing:
    """How a checkpoint's inputs were prepared: short side to ``resize`` (``interpolation``), centre
    ``crop``, then ``(rgb / 255 - mean) / std``."""

    resize: int
    crop: int
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def describe(self) -> str:
        """One line for logs: ``resize 232, crop 224, bilinear, mean (...), std (...)``."""
        return (
            f"resize {self.resize}, crop {self.crop}, {self.interpolation}, "
            f"mean {_numbers(self.mean)}, std {_numbers(self.std)}"
        )


@dataclass(frozen=True)
class Accuracy:
    """A published quality figure: ``metrics`` (e.g. {"top1": 80.858}) measured on ``dataset``."""

    dataset: str
    metrics: dict[str, float]

    def describe(self) -> str:
        figures = " ".join(f"{name} {value:g}" for name, value in self.metrics.items())
        return f"{figures} ({self.dataset})"


@dataclass
class CheckpointEntry:
    name: str
    url: str
    sha256: str | None  # full digest, or a prefix of >= 8 hex characters
    size: int | None
    format: str  # a key of FORMATS
    framework: str
    model: str
    description: str = ""
    source: str = ""
    preprocessing: Preprocessing | None = None
    accuracy: Accuracy | None = None


class Registry:
    """Checkpoint entries by name."""

    def __init__(self, entries: list[CheckpointEntry]):
        self._entries = {e.name: e for e in entries}

    def get(self, name: str) -> CheckpointEntry:
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            raise CheckpointError(f"unknown checkpoint '{name}' (known: {known})")
        return self._entries[name]

    def names(self) -> list[str]:
        return list(self._entries)

    def entries(self) -> list[CheckpointEntry]:
        return list(self._entries.values())


def load_registry(path) -> Registry:
    """Read and validate ``{checkpoints: [{name, url, sha256, size, format, ...}]}`` from YAML.

    Every problem (unknown or missing field, bad digest, unknown format, a preprocessing or accuracy
    value out of range, a repeated name) is a CheckpointError naming the entry.
    """
    import yaml

    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint registry not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise CheckpointError(f"{path} is not valid YAML: {one_line(e)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints") or [], list):
        raise CheckpointError(f"{path}: expected a 'checkpoints:' list")
    fields = {f.name for f in dataclasses.fields(CheckpointEntry)}
    required = {f.name for f in dataclasses.fields(CheckpointEntry) if f.default is dataclasses.MISSING}
    entries, seen = [], set()
    for i, item in enumerate(data.get("checkpoints") or []):
        where = f"{path}: checkpoints[{i}]"
        if not isinstance(item, dict):
            raise CheckpointError(f"{where} is not a mapping")
        where = f"{path}: checkpoint '{item.get('name', i)}'"
        if unknown := sorted(set(item) - fields):
            raise CheckpointError(f"{where} has unknown field(s) {', '.join(unknown)}")
        if missing := sorted(required - set(item)):
            raise CheckpointError(f"{where} lacks field(s) {', '.join(missing)}")
        if item["name"] in seen:
            raise CheckpointError(f"{where} is listed twice")
        seen.add(item["name"])
        if item["sha256"] is not None and not is_sha256_prefix(str(item["sha256"])):
            raise CheckpointError(f"{where}: sha256 '{item['sha256']}' is not 8 to 64 hex characters")
        if item["size"] is not None and not (isinstance(item["size"], int) and item["size"] > 0):
            raise CheckpointError(f"{where}: size must be a positive number of bytes or null")
        if item["format"] not in FORMATS:
            raise CheckpointError(f"{where}: format '{item['format']}' is not one of {', '.join(FORMATS)}")
        item = dict(item)
        if item.get("preprocessing") is not None:
            item["preprocessing"] = _parse_preprocessing(item["preprocessing"], where)
        if item.get("accuracy") is not None:
            item["accuracy"] = _parse_accuracy(item["accuracy"], where)
        entries.append(CheckpointEntry(**item))
    return Registry(entries)


def _parse_preprocessing(value, where: str) -> Preprocessing:
    where = f"{where}: preprocessing"
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} is not a mapping")
    fields = [f.name for f in dataclasses.fields(Preprocessing)]
    if unknown := sorted(set(value) - set(fields)):
        raise CheckpointError(f"{where} has unknown field(s) {', '.join(unknown)}")
    if missing := [name for name in fields if name not in value]:
        raise CheckpointError(f"{where} lacks field(s) {', '.join(missing)}")
    for name in ("resize", "crop"):
        if not (isinstance(value[name], int) and not isinstance(value[name], bool) and value[name] > 0):
            raise CheckpointError(f"{where}: {name} must be a positive number of pixels, got {value[name]!r}")
    if value["resize"] < value["crop"]:
        raise CheckpointError(f"{where}: resize {value['resize']} is smaller than crop {value['crop']}")
    if value["interpolation"] not in INTERPOLATIONS:
        raise CheckpointError(
            f"{where}: interpolation '{value['interpolation']}' is not one of {', '.join(INTERPOLATIONS)}"
        )
    for name in ("mean", "std"):
        numbers = value[name]
        if not (
            isinstance(numbers, list)
            and len(numbers) == 3
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in numbers)
        ):
            raise CheckpointError(f"{where}: {name} must be 3 numbers in 0..1 (RGB), got {numbers!r}")
    if not all(x > 0 for x in value["std"]):
        raise CheckpointError(f"{where}: std must be positive, got {value['std']!r}")
    return Preprocessing(
        resize=value["resize"],
        crop=value["crop"],
        interpolation=value["interpolation"],
        mean=tuple(float(x) for x in value["mean"]),
        std=tuple(float(x) for x in value["std"]),
    )


def _parse_accuracy(value, where: str) -> Accuracy:
    where = f"{where}: accuracy"
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} is not a mapping")
    if unknown := sorted(set(value) - set(ACCURACY_METRICS) - {"dataset"}):
        raise CheckpointError(
            f"{where} has unknown field(s) {', '.join(unknown)} (metrics: {', '.join(ACCURACY_METRICS)})"
        )
    if not isinstance(value.get("dataset"), str) or not value["dataset"].strip():
        raise CheckpointError(f"{where} lacks the dataset it was measured on")
    metrics = {name: number for name, number in value.items() if name != "dataset"}
    if not metrics:
        raise CheckpointError(f"{where} names no metric ({', '.join(ACCURACY_METRICS)})")
    for name, number in metrics.items():
        top = ACCURACY_METRICS[name]
        if not (isinstance(number, (int, float)) and not isinstance(number, bool) and 0 < number <= top):
            raise CheckpointError(f"{where}: {name} must be a number in (0, {top:g}], got {number!r}")
    return Accuracy(dataset=value["dataset"], metrics={name: float(v) for name, v in metrics.items()})


def _numbers(values) -> str:
    return "(" + ", ".join(f"{v:g}" for v in values) + ")"


def default_cache_dir() -> pathlib.Path:
    """``$ZOO_CACHE`` or ``~/.cache/zoo/checkpoints``."""
    if os.environ.get("ZOO_CACHE"):
        return pathlib.Path(os.environ["ZOO_CACHE"])
    return pathlib.Path.home() / ".cache" / "zoo" / "checkpoints"


def unpack_bert_tf_zip(path) -> pathlib.Path:
    """Extract Google's BERT ``NAME.zip`` beside it as ``NAME/`` (once, renamed into place when whole)
    and return its ``bert_model.ckpt`` prefix; :class:`CheckpointError` for a bad or foreign zip."""
    import shutil
    import zipfile

    path = pathlib.Path(path)
    out = path.with_suffix("")
    if not out.is_dir():
        partial = out.parent / (out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with zipfile.ZipFile(path) as archive:
                archive.extractall(partial)
        except zipfile.BadZipFile:
            shutil.rmtree(partial, ignore_errors=True)
            raise CheckpointError(f"{path} is not a zip archive") from None
        partial.replace(out)
    prefixes = sorted(out.rglob("bert_model.ckpt.index"))
    if not prefixes:
        raise CheckpointError(f"{path} holds no bert_model.ckpt (expected Google's BERT zip layout)")
    return prefixes[0].with_suffix("")


def fetch(entry: CheckpointEntry, cache_dir=None, progress=True) -> pathlib.Path:
    """``zoo.io.download`` with the entry's url, sha256, size and format, into cache_dir/<entry name>/<file
    name>; a download that fails is a CheckpointError."""
    cache_dir = pathlib.Path(cache_dir or default_cache_dir()) / entry.name
    try:
        return download(
            entry.url,
            sha256=entry.sha256,
            size=entry.size,
            cache_dir=cache_dir,
            progress=progress,
            file_format=entry.format,
        )
    except DownloadError as e:
        raise CheckpointError(str(e)) from None


USAGE = "{prog} {{list,pull NAME}} [--cache-dir DIR]"
COMMANDS = ("list", "pull")


@entry_point
def main(argv=None) -> None:
    """``python -m zoo.checkpoints --registry FILE {list,pull NAME} [--cache-dir DIR]``.

    ``list`` prints each entry's name, format, size, published accuracy and description; ``pull``
    downloads (or finds in the cache) one entry and prints its path. A model's
    ``scripts/download_checkpoint.sh`` passes its own registry and ``--prog`` (the name in messages).
    """
    import argparse

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--prog", default=None)
    known, _ = parser.parse_known_args(argv)
    prog = known.prog or "python -m zoo.checkpoints --registry FILE"
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=USAGE.format(prog=prog),
        description="List the pretrained checkpoints of a registry, or pull one into the cache "
        "(resumed, verified, moved into place only when whole).",
        epilog="The cache is --cache-dir, else $ZOO_CACHE, else ~/.cache/zoo/checkpoints.",
    )
    parser.add_argument(
        "command", metavar="{list,pull}", help="list: print the registry; pull NAME: fetch one"
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="the checkpoint to pull")
    parser.add_argument("--registry", required=True, metavar="FILE", help="the model's checkpoints.yaml")
    parser.add_argument("--cache-dir", metavar="DIR", help="where pulled files are kept")
    parser.add_argument("--prog", default=None, help=argparse.SUPPRESS)
    if "--list" in argv:
        raise UserError(f"--list is gone: use '{prog} list'")
    args = parser.parse_args(argv)
    if args.command not in COMMANDS:
        raise UserError(f"'{args.command}' is not a command: use '{prog} pull {args.command}'")
    if args.command == "list" and args.name:
        raise UserError(f"list takes no name: use '{prog} pull {args.name}'")
    if args.command == "pull" and not args.name:
        raise UserError(f"pull needs a checkpoint name: '{prog} pull NAME' ('{prog} list' shows them)")
    registry = load_registry(args.registry)
    if args.command == "list":
        print_registry(registry)
    else:
        print(fetch(registry.get(args.name), cache_dir=args.cache_dir))


def print_registry(registry: Registry, out=None) -> None:
    """A table: name, format, size, published accuracy, description."""
    out = out or sys.stdout
    rows = [("NAME", "FORMAT", "SIZE", "ACCURACY", "DESCRIPTION")]
    for entry in registry.entries():
        size = f"{entry.size / 1e6:.1f} MB" if entry.size else "-"
        accuracy = entry.accuracy.describe() if entry.accuracy else "-"
        rows.append((entry.name, entry.format, size, accuracy, entry.description))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4],
            file=out,
        )


if __name__ == "__main__":
    main()
