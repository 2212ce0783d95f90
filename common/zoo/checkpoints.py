"""Pretrained checkpoint registry, verified download with resume into a cache, atomic writes.

A registry is a YAML file beside each model (``checkpoints.yaml``)::

    checkpoints:
      - name: resnet50_torchvision_v2
        url: https://download.pytorch.org/models/resnet50-11ad3fa6.pth
        sha256: 11ad3fa6          # full digest, or a prefix of >= 8 hex characters
        size: 102540417
        format: pytorch_state_dict
        framework: pytorch
        model: ResNet50
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


@dataclass
class CheckpointEntry:
    name: str
    url: str
    sha256: str | None  # full digest, or a prefix of >= 8 hex characters
    size: int | None
    format: str
    framework: str
    model: str
    description: str = ""
    source: str = ""


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
    """Read ``{checkpoints: [{name, url, sha256, size, format, framework, model, ...}]}`` from YAML."""
    import yaml

    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint registry not found: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    fields = {f.name for f in dataclasses.fields(CheckpointEntry)}
    required = {f.name for f in dataclasses.fields(CheckpointEntry) if f.default is dataclasses.MISSING}
    entries = []
    for i, item in enumerate(data.get("checkpoints") or []):
        where = f"{path}: checkpoints[{i}]"
        if not isinstance(item, dict):
            raise CheckpointError(f"{where} is not a mapping")
        if unknown := sorted(set(item) - fields):
            raise CheckpointError(f"{where} has unknown field(s) {', '.join(unknown)}")
        if missing := sorted(required - set(item)):
            raise CheckpointError(f"{where} lacks field(s) {', '.join(missing)}")
        if item["sha256"] is not None:
            _check_digest(str(item["sha256"]), where)
        entries.append(CheckpointEntry(**item))
    return Registry(entries)


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


def download(
    url, *, sha256=None, size=None, dest=None, cache_dir=None, progress=True, timeout=60
) -> pathlib.Path:
    """Download ``url`` to ``dest`` (default: cache_dir/<file name>), resuming a ``.part`` with HTTP Range.

    Verifies size and sha256 (a prefix is accepted), then moves into place. A verified file already
    at ``dest`` is returned without network. On failure ``dest`` is untouched; a ``.part`` that fails
    verification is removed, one cut short by the network is kept so that the next call resumes it.
    """
    if sha256 is not None:
        _check_digest(sha256, url)
    if dest is None:
        file_name = pathlib.PurePosixPath(urllib.parse.urlparse(url).path).name
        if not file_name:
            raise CheckpointError(f"cannot name a cache file after {url}: pass dest")
        dest = pathlib.Path(cache_dir or default_cache_dir()) / file_name
    dest = pathlib.Path(dest)
    if dest.is_file() and _problem(dest, sha256, size) is None:
        return dest

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    _fetch_to_part(url, part, size, progress, timeout)
    if problem := _problem(part, sha256, size):
        part.unlink(missing_ok=True)
        raise CheckpointError(f"{url}: {problem}; nothing was written to {dest}")
    os.replace(part, dest)
    return dest


def fetch(entry: CheckpointEntry, cache_dir=None, progress=True) -> pathlib.Path:
    """``download()`` with the entry's url, sha256 and size, into cache_dir/<entry name>/<file name>."""
    cache_dir = pathlib.Path(cache_dir or default_cache_dir()) / entry.name
    return download(entry.url, sha256=entry.sha256, size=entry.size, cache_dir=cache_dir, progress=progress)


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
