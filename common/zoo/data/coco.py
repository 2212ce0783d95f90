"""COCO 2017 for the detection and segmentation models: fetch, verify and lay out the archives.

    prepare_coco("/data/coco", splits=("val",))   # val2017/ + annotations/ under /data/coco

Downloads resume from a ``.part`` file (zoo.io.download), are checked against the published
size and MD5 (a ``.md5-ok`` marker records a verified archive), and each folder is extracted beside its
final place and renamed into it, so an interrupted run leaves nothing half-made behind. Failures are
one-line UserErrors.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import UserError

BASE_URL = "http://images.cocodataset.org"


@dataclass(frozen=True)
class Archive:
    name: str
    path: str  # URL path under the base URL
    md5: str
    size: int | None
    folders: tuple[str, ...]  # top-level folders the zip holds


COCO2017 = {
    "train": Archive(
        "train2017.zip", "zips/train2017.zip", "cced6f7f71b7629ddf16f17bbcfab6b2", None, ("train2017",)
    ),
    "val": Archive(
        "val2017.zip", "zips/val2017.zip", "442b8da7639aecaf257c1dceb8ba8c80", 815_585_330, ("val2017",)
    ),
    "annotations": Archive(
        "annotations_trainval2017.zip",
        "annotations/annotations_trainval2017.zip",
        "f4bbac642086de4f52a3fdda2de5fa2c",
        252_907_541,
        ("annotations",),
    ),
}


def md5_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fetch_archive(archive: Archive, zips_dir: Path, base_url: str) -> Path:
    """Download (resumable) and MD5-check one archive; a verified file is not fetched again."""
    from zoo.io import DownloadError, download

    dest = zips_dir / archive.name
    ok_marker = zips_dir / f"{archive.name}.md5-ok"
    if dest.is_file() and ok_marker.is_file():
        return dest
    try:
        download(f"{base_url.rstrip('/')}/{archive.path}", size=archive.size, dest=dest)
    except DownloadError as e:
        raise UserError(f"{archive.name}: {e}") from None
    print(f"checking MD5 of {dest} ...", file=sys.stderr)
    got = md5_file(dest)
    if got != archive.md5:
        dest.unlink()
        raise UserError(f"{archive.name}: MD5 {got} != published {archive.md5}; removed it, run again")
    ok_marker.write_text(got + "\n")
    return dest


def extract(zip_path: Path, folders: tuple[str, ...], data_dir: Path) -> None:
    """Extract into a temporary folder beside the target, then rename each top-level folder into place."""
    if all((data_dir / f).is_dir() for f in folders):
        return
    tmp = data_dir / f".extract-{zip_path.stem}"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"extracting {zip_path.name} ...", file=sys.stderr)
    try:
        with zipfile.ZipFile(zip_path) as z:
            z.extractall(tmp)
    except zipfile.BadZipFile as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{zip_path} is not a valid zip: {e}") from None
    for f in folders:
        if not (tmp / f).is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"{zip_path.name} has no {f}/ folder")
        if not (data_dir / f).is_dir():
            (tmp / f).rename(data_dir / f)
    shutil.rmtree(tmp, ignore_errors=True)


def prepare_coco(
    data_dir, splits=("train", "val"), *, base_url: str = BASE_URL, archives=None, keep_zips: bool = True
) -> Path:
    """Fetch, verify and extract the archives for ``splits`` (plus annotations) into ``data_dir``."""
    archives = archives or COCO2017
    data_dir = Path(data_dir)
    zips = data_dir / "zips"
    zips.mkdir(parents=True, exist_ok=True)
    for key in [*splits, "annotations"]:
        if key not in archives:
            choices = ", ".join(k for k in archives if k != "annotations")
            raise UserError(f"unknown split '{key}' (choose from {choices})")
        a = archives[key]
        if all((data_dir / f).is_dir() for f in a.folders):
            print(f"{', '.join(a.folders)}: present", file=sys.stderr)
            continue
        extract(fetch_archive(a, zips, base_url), a.folders, data_dir)
        if not keep_zips:
            (zips / a.name).unlink(missing_ok=True)
    return data_dir
