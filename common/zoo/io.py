"""Files written whole or not at all, and downloads that resume and verify before they land.

    with atomic_write(checkpoint) as tmp:      # a reader never sees half a file
        torch.save(state, tmp)
    remove_stale_temps(results_dir)            # what a killed writer left behind
    download(url, sha256="11ad3fa6", dest="weights.pth")   # resumed, verified, then moved into place

``download`` resumes a ``.part`` file with HTTP Range, checks size and sha256 (a prefix is accepted)
or, without a digest, the file's signature against a declared format (an HTML error page served with
HTTP 200 is refused), and only then renames it into place. Failures are :class:`DownloadError`.
"""

from __future__ import annotations

import contextlib
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

from zoo import file_formats
from zoo.errors import UserError

_CHUNK = 1 << 20


class DownloadError(UserError):
    """A one-line reason a file could not be downloaded or verified."""


# The file formats a download may declare, and what a file of each looks like (see _format_problem).
FORMATS = {
    "pytorch": "a torch.save file (zip or pickle)",
    "safetensors": "a safetensors file",
    "zip": "a zip archive",
    "hdf5": "an HDF5 file",
    "tar": "a tar archive (plain, gzip, bzip2 or xz)",
    "savedmodel": "a SavedModel directory packed as a tar archive",
    "mxnet-params": "an MXNet NDArray file (.params)",
}


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_sha256_prefix(digest: str) -> bool:
    """True for a sha256 digest or a prefix of it of at least 8 hex characters."""
    return re.fullmatch(r"[0-9a-fA-F]{8,64}", digest) is not None


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


def download(
    url, *, sha256=None, size=None, dest=None, cache_dir=None, progress=True, timeout=60, file_format=None
) -> pathlib.Path:
    """Download ``url`` to ``dest`` (or cache_dir/<file name>), resuming a ``.part`` with HTTP Range.

    Verifies size and sha256 (a prefix is accepted); without a sha256, a ``file_format`` (a key of
    FORMATS) is checked against the file's signature instead. Only then is the file moved into place.
    A verified file already at ``dest`` is returned without network; one there that is not of its
    format is removed. On failure ``dest`` is untouched; a ``.part`` that fails verification is
    removed, one cut short by the network is kept so that the next call resumes it.
    """
    if sha256 is not None and not is_sha256_prefix(sha256):
        raise DownloadError(f"{url}: sha256 '{sha256}' is not 8 to 64 hex characters")
    if file_format is not None and file_format not in FORMATS:
        raise DownloadError(f"{url}: format '{file_format}' is not one of {', '.join(FORMATS)}")
    if dest is None:
        if cache_dir is None:
            raise ValueError("download needs dest or cache_dir")
        file_name = pathlib.PurePosixPath(urllib.parse.urlparse(url).path).name
        if not file_name:
            raise DownloadError(f"cannot name a cache file after {url}: pass dest")
        dest = pathlib.Path(cache_dir) / file_name
    dest = pathlib.Path(dest)
    content_format = file_format if sha256 is None else None  # a digest says more than a signature
    if dest.is_file():
        if _problem(dest, sha256, size) is None:
            if content_format is None or _format_problem(dest, content_format) is None:
                return dest
            dest.unlink()  # not what the entry says it is: never serve it again

    created = [folder for folder in (dest.parent, *dest.parent.parents) if not folder.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        _fetch_to_part(url, part, size, progress, timeout)
        problem = _problem(part, sha256, size)
        if problem is None and content_format is not None:
            problem = _format_problem(part, content_format)
        if problem:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: {problem}; nothing was written to {dest}")
    except DownloadError:
        if not part.exists():  # no .part kept to resume: the cache is left as it was
            _remove_empty_folders(created)
        raise
    os.replace(part, dest)
    return dest


def _remove_empty_folders(folders: list[pathlib.Path]) -> None:
    """Remove ``folders`` (the deepest first) while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


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
        raise DownloadError(f"format '{file_format}' is not one of {', '.join(FORMATS)}")
    if not looks_right:
        return f"not {FORMATS[file_format]} but {file_formats.what_it_looks_like(head)}"
    if file_format == "hdf5":
        return file_formats.hdf5_cut_short(head, size)
    if file_format in ("tar", "savedmodel"):
        return file_formats.tar_cut_short(path, head)
    if file_format == "mxnet-params":
        return file_formats.mxnet_params_cut_short(path, size)
    return file_formats.cut_short(path, head)


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
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise DownloadError(f"{url}: {getattr(e, 'reason', e)}") from None

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
            raise DownloadError(
                f"{url}: transfer broke after {got} bytes ({e}); run again to resume"
            ) from None
        finally:
            if meter:
                meter.close(got)
    if length is not None and got != total:
        raise DownloadError(f"{url}: connection closed after {got} of {total} bytes; run again to resume")


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
