"""Pretrained checkpoint registry, verified download with resume into a cache, atomic writes.

A registry is a YAML file beside each model (``checkpoints.yaml``)::

    checkpoints:
      - name: torchvision-imagenet1k-v2
        url: https://download.pytorch.org/models/resnet50-11ad3fa6.pth
        sha256: 11ad3fa6          # full digest, or a prefix of >= 8 hex characters; null if none is published
        size: null                # bytes, or null
        format: pytorch           # one of FORMATS: what the file must look like
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

import contextlib
import dataclasses
import hashlib
import os
import pathlib
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

_CHUNK = 1 << 20


class CheckpointError(Exception):
    """A one-line reason a checkpoint could not be fetched or verified."""


# The file formats an entry may declare, and what a file of each looks like (see _format_problem).
FORMATS = {
    "pytorch": "a torch.save file (zip or pickle)",
    "safetensors": "a safetensors file",
    "zip": "a zip archive",
    "hdf5": "an HDF5 file",
    "tar": "a tar archive (plain, gzip, bzip2 or xz)",
    "savedmodel": "a SavedModel directory packed as a tar archive",
    "mxnet-params": "an MXNet NDArray file (.params)",
}
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
        raise CheckpointError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
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
        if item["sha256"] is not None:
            _check_digest(str(item["sha256"]), where)
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


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path):
    """Yield a temp path beside ``path``; rename it over ``path`` on success, remove it on exception.

    A reader never sees a half-written file, and a crash never replaces a good one::

        with atomic_write(ckpt_path) as tmp:
            torch.save(state, tmp)
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = pathlib.Path(tmp)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide checkpoints from the user's group
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temps(directory) -> list[pathlib.Path]:
    """Delete the temporary files (``.NAME.XXXXXXXX.tmp``) that :func:`atomic_write` calls of a killed
    process left in ``directory``; call it at start-up, before the run writes there. Returns them."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    stale = sorted(p for p in directory.glob(".*.tmp") if p.is_file())
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


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


def download(
    url, *, sha256=None, size=None, dest=None, cache_dir=None, progress=True, timeout=60, file_format=None
) -> pathlib.Path:
    """Download ``url`` to ``dest`` (default: cache_dir/<file name>), resuming a ``.part`` with HTTP Range.

    Verifies size and sha256 (a prefix is accepted); without a sha256, a ``file_format`` (a key of
    FORMATS) is checked against the file's signature instead. Only then is the file moved into place.
    A verified file already at ``dest`` is returned without network; one there that is not of its
    format is removed. On failure ``dest`` is untouched; a ``.part`` that fails verification is
    removed, one cut short by the network is kept so that the next call resumes it.
    """
    if sha256 is not None:
        _check_digest(sha256, url)
    if file_format is not None and file_format not in FORMATS:
        raise CheckpointError(f"{url}: format '{file_format}' is not one of {', '.join(FORMATS)}")
    if dest is None:
        file_name = pathlib.PurePosixPath(urllib.parse.urlparse(url).path).name
        if not file_name:
            raise CheckpointError(f"cannot name a cache file after {url}: pass dest")
        dest = pathlib.Path(cache_dir or default_cache_dir()) / file_name
    dest = pathlib.Path(dest)
    content_format = file_format if sha256 is None else None  # a digest says more than a signature
    if dest.is_file():
        if _problem(dest, sha256, size) is None:
            if content_format is None or _format_problem(dest, content_format) is None:
                return dest
            dest.unlink()  # not what the entry says it is: never serve it again

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    _fetch_to_part(url, part, size, progress, timeout)
    problem = _problem(part, sha256, size)
    if problem is None and content_format is not None:
        problem = _format_problem(part, content_format)
    if problem:
        part.unlink(missing_ok=True)
        raise CheckpointError(f"{url}: {problem}; nothing was written to {dest}")
    os.replace(part, dest)
    return dest


def fetch(entry: CheckpointEntry, cache_dir=None, progress=True) -> pathlib.Path:
    """``download()`` with the entry's url, sha256, size and format, into cache_dir/<entry name>/<file name>."""
    cache_dir = pathlib.Path(cache_dir or default_cache_dir()) / entry.name
    return download(
        entry.url,
        sha256=entry.sha256,
        size=entry.size,
        cache_dir=cache_dir,
        progress=progress,
        file_format=entry.format,
    )


def _check_digest(digest: str, where: str) -> None:
    if not re.fullmatch(r"[0-9a-fA-F]{8,64}", digest):
        raise CheckpointError(f"{where}: sha256 '{digest}' is not 8 to 64 hex characters")


def _problem(path: pathlib.Path, sha256: str | None, size: int | None) -> str | None:
    """Why ``path`` is not the expected file, or None."""
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        return f"size {actual_size} bytes, expected {size}"
    if sha256 is not None:
        actual = sha256_file(path)
        if not actual.startswith(sha256.lower()):
            return f"sha256 {actual} does not match the expected {sha256}"
    return None


_ZIP = b"PK\x03\x04"
_HDF5 = b"\x89HDF\r\n\x1a\n"
_COMPRESSED_TAR = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_MXNET_LIST_MAGIC = (0x112).to_bytes(8, "little")


def _format_problem(path: pathlib.Path, file_format: str) -> str | None:
    """Why ``path`` does not look like ``file_format`` (its leading bytes), or None."""
    with open(path, "rb") as f:
        head = f.read(4096)
    size = path.stat().st_size
    if file_format == "pytorch":  # torch.save writes a zip; before torch 1.6, a pickle (protocol 2+)
        looks_right = head.startswith(_ZIP) or (len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5)
    elif file_format == "safetensors":  # 8-byte little-endian header length, then a JSON header
        header = int.from_bytes(head[:8], "little") if len(head) >= 8 else 0
        looks_right = 2 <= header <= size - 8 and head[8:9] == b"{"
    elif file_format == "zip":
        looks_right = head.startswith(_ZIP)
    elif file_format == "hdf5":  # the superblock sits at 0, or after a user block of 512 * 2^n bytes
        looks_right = any(head[offset : offset + 8] == _HDF5 for offset in (0, 512, 1024, 2048))
    elif file_format in ("tar", "savedmodel"):
        looks_right = head[257:262] == b"ustar" or head.startswith(_COMPRESSED_TAR)
    elif file_format == "mxnet-params":
        looks_right = head.startswith(_MXNET_LIST_MAGIC)
    else:
        raise CheckpointError(f"format '{file_format}' is not one of {', '.join(FORMATS)}")
    if looks_right:
        return None
    return f"not {FORMATS[file_format]} but {_what_it_looks_like(head)}"


def _what_it_looks_like(head: bytes) -> str:
    """A few words on what a rejected file holds: an HTML page, text, or its first bytes."""
    if not head:
        return "an empty file"
    text = head.decode("utf-8", errors="replace")
    if b"\x00" in head or text.count("\ufffd") > 4:
        return f"bytes {head[:8].hex()}"
    snippet = " ".join(text.split())[:60]
    if snippet.lower().startswith(("<!doctype html", "<html")) or "<body" in text.lower():
        return f"an HTML page ({snippet!r})"
    return f"text ({snippet!r})"


def _fetch_to_part(url: str, part: pathlib.Path, size: int | None, progress: bool, timeout: float) -> None:
    """Append the rest of ``url`` to ``part`` (Range from its current length)."""
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:
        part.unlink()
        have = 0
    headers = {"User-Agent": "zoo-checkpoints"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the part is already whole (or the server cannot range it): verify it
            return
        raise CheckpointError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise CheckpointError(f"{url}: {getattr(e, 'reason', e)}") from None

    with response:
        if have and response.status != 206:  # server ignored Range: start over
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else size
        meter = _ByteProgress(url, total, have) if progress else None
        got = have
        try:
            with open(part, "ab" if have else "wb") as f:
                while chunk := response.read(_CHUNK):
                    f.write(chunk)
                    got += len(chunk)
                    if meter:
                        meter.update(got)
        except OSError as e:  # includes http.client.IncompleteRead and timeouts
            raise CheckpointError(
                f"{url}: transfer broke after {got} bytes ({e}); run again to resume"
            ) from None
        finally:
            if meter:
                meter.close(got)
    if length is not None and got != total:
        raise CheckpointError(f"{url}: connection closed after {got} of {total} bytes; run again to resume")


class _ByteProgress:
    """A one-line download meter on stderr: bytes, percent, MB/s."""

    def __init__(self, url: str, total: int | None, start: int):
        self.name = pathlib.PurePosixPath(urllib.parse.urlparse(url).path).name or url
        self.total, self.start, self.t0, self.shown = total, start, time.monotonic(), 0.0

    def update(self, got: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.shown < 0.5:
            return
        self.shown = now
        rate = (got - self.start) / max(now - self.t0, 1e-9) / 1e6
        of = f"/{self.total / 1e6:.1f} MB ({100 * got / self.total:.0f}%)" if self.total else " MB"
        sys.stderr.write(f"\r{self.name}: {got / 1e6:.1f}{of} {rate:.1f} MB/s")
        sys.stderr.flush()

    def close(self, got: int) -> None:
        self.update(got, final=True)
        sys.stderr.write("\n")


USAGE = "{prog} {{list,pull NAME}} [--cache-dir DIR]"
COMMANDS = ("list", "pull")


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
        raise SystemExit(f"error: --list is gone: use '{prog} list'")
    args = parser.parse_args(argv)
    if args.command not in COMMANDS:
        raise SystemExit(f"error: '{args.command}' is not a command: use '{prog} pull {args.command}'")
    if args.command == "list" and args.name:
        raise SystemExit(f"error: list takes no name: use '{prog} pull {args.name}'")
    if args.command == "pull" and not args.name:
        raise SystemExit(
            f"error: pull needs a checkpoint name: '{prog} pull NAME' ('{prog} list' shows them)"
        )
    try:
        registry = load_registry(args.registry)
        if args.command == "list":
            print_registry(registry)
        else:
            print(fetch(registry.get(args.name), cache_dir=args.cache_dir))
    except CheckpointError as e:
        raise SystemExit(f"error: {e}") from None


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
