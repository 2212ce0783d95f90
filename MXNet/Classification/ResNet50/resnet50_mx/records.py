"""Check RecordIO files before MXNet's C++ reader sees them, and the manifest that lets a run skip it.

``mx.io.ImageRecordIter`` ends the process without a message on bad data: a truncated ``.rec``
(its index points past the end) is a segmentation fault, an image it cannot decode a floating
point exception. So every run checks its files first, with a one-line error naming the file and
the record:

* the index and length pass (every run, seconds for ImageNet): each ``.idx`` offset holds a record
  header, each record ends inside the file, each label is a class id;
* the decode pass: every image decoded once with OpenCV, as the C++ reader does. Runs do it for the
  validation split, and for a training split of at most ``DECODE_AT_START`` records;
  ``scripts/download_data.sh --verify`` (and the conversion itself) does it for every split and
  writes ``manifest.json`` (zoo.manifest), and a run trusts the files that still match it.

Record layout (dmlc-core RecordIO): a part is ``uint32 magic, uint32 cflag << 29 | length``, the
data, padding to 4 bytes; cflag 0 is a whole record, 1/2/3 the first/middle/last part of a record
whose data held the magic (the reader puts it back between parts). The data is MXNet's IRHeader
(``uint32 flag, float32 label, uint64 id, uint64 id2``), ``flag`` more float labels, the image.
"""

from __future__ import annotations

import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import UserError

MAGIC = 0xCED7230A
PART = struct.Struct("<II")  # magic, cflag << 29 | length
IR_HEADER = struct.Struct("<IfQQ")  # flag, label, id, id2
LENGTH_MASK = (1 << 29) - 1
DECODE_AT_START = 50_000  # a training split this small is decoded at start-up without a manifest
SPLITS = ("train", "val")


@dataclass
class SplitCheck:
    """What the check of one split found."""

    records: int
    label_max: int  # the largest class id
    label_max_key: int  # the record that holds it
    decoded: bool  # every image was decoded (not only the index and length pass)


class RecordError(UserError):
    """A one-line error naming the file and the record."""


def read_index(idx: Path) -> list[tuple[int, int]]:
    """(key, byte offset) of every line of an ``.idx`` file."""
    entries = []
    with open(idx) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.split()
            try:
                key, offset = int(fields[0]), int(fields[1])
            except (ValueError, IndexError):
                raise RecordError(
                    f"{idx} line {number} is not 'key<TAB>offset': {line.strip()[:60]!r}"
                ) from None
            entries.append((key, offset))
    if not entries:
        raise RecordError(f"{idx} lists no records")
    return entries


def _where(rec: Path, key: int, offset: int) -> str:
    return f"{rec} record {key} (byte {offset})"


def _read_parts(f, rec: Path, key: int, offset: int, size: int, whole: bool) -> tuple[bytes, int]:
    """The record at ``offset``: its data (only the first part's first 64 bytes unless ``whole``)
    and the number of parts. Raises RecordError when a part header or its length is wrong."""
    data, position, parts = b"", offset, 0
    while True:
        f.seek(position)
        head = f.read(PART.size)
        if len(head) < PART.size:
            raise RecordError(
                f"{rec} is truncated: record {key} (byte {offset}) lies past its end ({size} bytes); "
                "re-create it with scripts/download_data.sh"
            )
        magic, length_flag = PART.unpack(head)
        cflag, length = length_flag >> 29, length_flag & LENGTH_MASK
        if magic != MAGIC:
            raise RecordError(
                f"{_where(rec, key, offset)}: no record starts there (the .idx does not fit the .rec)"
            )
        end = position + PART.size + length
        if end > size:
            raise RecordError(
                f"{rec} is truncated: record {key} (byte {offset}) ends at byte {end}, past its end "
                f"({size} bytes); re-create it with scripts/download_data.sh"
            )
        expected = (0, 1) if parts == 0 else (2, 3)
        if cflag not in expected:
            raise RecordError(f"{_where(rec, key, offset)}: broken record (part flag {cflag})")
        if parts and whole:
            data += struct.pack("<I", MAGIC)
        if whole or parts == 0:
            data += f.read(length if whole else min(length, 64))
        parts += 1
        position = end + (-length % 4)
        if cflag in (0, 3):
            return data, parts


def _label_and_image(data: bytes, where: str) -> tuple[float, bytes]:
    if len(data) < IR_HEADER.size:
        raise RecordError(f"{where}: record too short for its header ({len(data)} bytes)")
    flag, label, _, _ = IR_HEADER.unpack_from(data)
    start = IR_HEADER.size
    if flag > 0:  # a label array: the reader takes its first value
        if len(data) < start + 4 * flag:
            raise RecordError(f"{where}: record too short for its {flag} labels")
        (label,) = struct.unpack_from("<f", data, start)
        start += 4 * flag
    return label, data[start:]


def _decodes(image: bytes) -> bool:
    import cv2
    import numpy as np

    # Reduced decoding reads every entropy-coded byte (a cut or corrupt JPEG still fails) at a
    # fraction of the cost of a full decode.
    return cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_REDUCED_COLOR_8) is not None


def _check_chunk(rec: Path, entries: list[tuple[int, int]], size: int, decode: bool) -> tuple[int, int]:
    """(largest label, its key) of ``entries``; RecordError at the first bad record."""
    label_max, label_max_key = -1, -1
    with open(rec, "rb") as f:
        for key, offset in entries:
            data, _ = _read_parts(f, rec, key, offset, size, whole=decode)
            label, image = _label_and_image(data, _where(rec, key, offset))
            if label < 0 or label != int(label):
                raise RecordError(f"{_where(rec, key, offset)}: label {label} is not a class id")
            if decode and not _decodes(image):
                raise RecordError(
                    f"{_where(rec, key, offset)}: the image cannot be decoded ({len(image)} bytes, "
                    f"starting {image[:4].hex()}); re-create the file from good images"
                )
            if label > label_max:
                label_max, label_max_key = int(label), key
    return label_max, label_max_key


def check_split(rec: Path, idx: Path, *, decode: bool, threads: int = 1) -> SplitCheck:
    """The index and length pass over ``rec`` (and the decode pass when ``decode``)."""
    entries = read_index(idx)
    size = rec.stat().st_size
    threads = max(1, min(threads, len(entries) // 1000 + 1))
    chunks = [entries[i::threads] for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:  # OpenCV decodes without the GIL
        found = list(pool.map(lambda chunk: _check_chunk(rec, chunk, size, decode), chunks))
    label_max, label_max_key = max(found)
    return SplitCheck(len(entries), label_max, label_max_key, decode)


def record_paths(data_dir: str | os.PathLike, split: str) -> tuple[Path, Path]:
    """``<data_dir>/<split>.rec`` and its ``.idx``; a one-line error when either is missing."""
    root = Path(data_dir)
    if not root.is_dir():
        raise UserError(f"data dir {root} does not exist")
    rec, idx = root / f"{split}.rec", root / f"{split}.idx"
    for path in (rec, idx):
        if not path.is_file():
            raise UserError(
                f"data dir {root} has no {path.name} (make it with scripts/download_data.sh --image-folder DIR)"
            )
    return rec, idx


def read_classes(data_dir) -> list[str] | None:
    """Class names from ``classes.txt`` (written by the RecordIO conversion), index = line number."""
    if data_dir is None:
        return None
    path = Path(data_dir) / "classes.txt"
    return path.read_text().split() if path.is_file() else None


def check_dataset(data_dir, splits, *, threads: int = 1) -> dict[str, SplitCheck]:
    """Check ``splits`` of ``data_dir`` as a run needs them (files the manifest vouches for are
    trusted); returns what was found per split. Never writes in ``data_dir``."""
    from zoo.manifest import DataManifest

    manifest = DataManifest.read(data_dir)
    found = {}
    for split in splits:
        rec, idx = record_paths(data_dir, split)
        facts, index_facts = manifest.lookup(rec), manifest.lookup(idx)
        if facts and index_facts and facts.get("decoded"):
            found[split] = SplitCheck(facts["records"], facts["label_max"], facts["label_max_key"], True)
            continue
        decode = split == "val" or len(read_index(idx)) <= DECODE_AT_START
        found[split] = check_split(rec, idx, decode=decode, threads=threads)
        if not decode:
            print(
                f"{rec}: records and labels checked, images not decoded (scripts/download_data.sh --verify "
                f"--data-dir {data_dir} decodes them once and records the result in manifest.json)",
                file=sys.stderr,
            )
    check_labels(data_dir, found)
    return found


def check_labels(data_dir, found: dict[str, SplitCheck]) -> None:
    """Every label must name a class of ``classes.txt`` (when there is one)."""
    classes = read_classes(data_dir)
    for split, check in found.items():
        if classes is not None and check.label_max >= len(classes):
            raise RecordError(
                f"{Path(data_dir) / f'{split}.rec'} record {check.label_max_key} has label "
                f"{check.label_max}, but {Path(data_dir) / 'classes.txt'} lists {len(classes)} classes"
            )


def class_count(data_dir, found: dict[str, SplitCheck]) -> tuple[int, str]:
    """(number of classes, where that number comes from) of a checked dataset."""
    classes = read_classes(data_dir)
    if classes is not None:
        return len(classes), f"{Path(data_dir) / 'classes.txt'} lists {len(classes)}"
    split, check = max(found.items(), key=lambda item: item[1].label_max)
    return check.label_max + 1, f"{Path(data_dir) / f'{split}.rec'} has labels up to {check.label_max}"


def require_classes(data_dir, found: dict[str, SplitCheck], num_classes: int, what: str, fix: str) -> None:
    """A one-line error when ``num_classes`` (of ``what``: the recipe, a checkpoint) is not the data's."""
    count, source = class_count(data_dir, found)
    has_classes_txt = read_classes(data_dir) is not None
    if num_classes < count or (has_classes_txt and num_classes != count):
        raise UserError(f"{what} has {num_classes} classes, but {source}: {fix.format(count=count)}")


def verify_dataset(data_dir, *, threads: int = 1) -> dict[str, SplitCheck]:
    """Decode every image of every split in ``data_dir`` and record the files in ``manifest.json``."""
    from zoo.manifest import DataManifest

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} does not exist")
    splits = [s for s in SPLITS if (data_dir / f"{s}.rec").is_file()]
    if not splits:
        raise UserError(f"{data_dir} holds no train.rec or val.rec to verify")
    manifest = DataManifest.read(data_dir)
    found = {}
    for split in splits:
        rec, idx = record_paths(data_dir, split)
        found[split] = check = check_split(rec, idx, decode=True, threads=threads)
        manifest.record(idx)
        manifest.record(
            rec,
            records=check.records,
            label_max=check.label_max,
            label_max_key=check.label_max_key,
            decoded=True,
        )
        print(f"{rec}: {check.records} records, every image decodes", file=sys.stderr)
    check_labels(data_dir, found)
    manifest.write()
    return found
