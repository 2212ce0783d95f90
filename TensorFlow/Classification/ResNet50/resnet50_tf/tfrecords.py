"""Check TFRecord shards where they enter: a one-line error naming the shard and the record, before
training or evaluation starts, instead of a DataLossError traceback in the middle of an epoch.

* The length pass (every run; seconds for ImageNet): each shard is a whole number of records
  (``uint64 length, uint32 crc, data, uint32 crc``), and the shards hold the example counts of
  ``dataset.json``. It finds a truncated shard.
* The content pass: every record read with its checksums, parsed, its label a class of
  ``dataset.json``, its JPEG decoded (at 1/8 scale: every coded byte is still read). Runs do it
  for the validation split, and for a training split of at most ``DECODE_AT_START`` examples.
  ``scripts/download_data.sh --verify`` (and the conversion) does it for every shard and writes
  ``manifest.json`` (zoo.manifest): runs trust the shards that still match it.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import UserError, one_line

SPLITS = {"train": "train", "val": "validation"}
DECODE_AT_START = 50_000  # a training split this small is decoded at start-up without a manifest
RECORD_HEAD = struct.Struct("<QI")  # length, masked crc32c of the length
FOOTER = 4  # masked crc32c of the data


@dataclass
class DatasetInfo:
    data_dir: Path
    classes: list[str]
    train_examples: int
    val_examples: int
    label_offset: int = 0  # subtracted from stored labels (1 for TFRecords with a background class 0)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def files(self, split: str) -> list[str]:
        shard = re.compile(rf"{SPLITS[split]}-\d+-of-\d+")  # not .tmp leftovers nor DALI .idx files
        found = sorted(str(p) for p in self.data_dir.iterdir() if shard.fullmatch(p.name))
        if not found:
            raise UserError(f"no {SPLITS[split]}-*-of-* TFRecord shards in {self.data_dir}")
        return found


def read_dataset_info(data_dir) -> DatasetInfo:
    """The TFRecord directory's dataset.json, checked; a clear error if the directory is not one."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} does not exist")
    meta = data_dir / "dataset.json"
    if not meta.is_file():
        raise UserError(
            f"{data_dir} has no dataset.json: convert an ImageNet-style folder with scripts/convert_tfrecords.sh"
        )
    try:
        info = json.loads(meta.read_text())
        return DatasetInfo(
            data_dir=data_dir,
            classes=list(info["classes"]),
            train_examples=int(info["train_examples"]),
            val_examples=int(info["validation_examples"]),
            label_offset=int(info.get("label_offset", 0)),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{meta} is not a valid dataset description: {one_line(e)}") from None


@dataclass
class ShardCheck:
    records: int
    label_max: int | None  # None: labels not read (length pass only)
    decoded: bool


class ShardError(UserError):
    """A one-line error naming the shard and the record."""


def count_records(shard: Path) -> int:
    """Records in ``shard`` by their length fields; ShardError when one runs past the end."""
    size, offset, index = shard.stat().st_size, 0, 0
    with open(shard, "rb") as f:
        while offset < size:
            head = f.read(RECORD_HEAD.size)
            length = RECORD_HEAD.unpack(head)[0] if len(head) == RECORD_HEAD.size else None
            end = None if length is None else offset + RECORD_HEAD.size + length + FOOTER
            if end is None or end > size:
                raise ShardError(
                    f"{shard} is truncated: record {index} (byte {offset}) runs past its end ({size} "
                    "bytes); convert the data again (scripts/download_data.sh)"
                )
            f.seek(end)
            offset, index = end, index + 1
    return index


def _parse_and_decode(record, label_offset: int):
    import tensorflow as tf

    parsed = tf.io.parse_single_example(
        record,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    image = tf.io.decode_jpeg(parsed["image/encoded"], channels=3, ratio=8)
    return parsed["image/class/label"] - label_offset, tf.shape(image)[0]


def _first_problem(shard: Path, label_offset: int) -> str:
    """Read ``shard`` one record at a time: the first bad record and what is wrong with it."""
    import tensorflow as tf

    records = iter(tf.data.TFRecordDataset(str(shard)))
    index = 0
    while True:
        try:
            record = next(records)
        except StopIteration:
            return "no record is bad on its own (re-run to check again)"
        except tf.errors.OpError as e:
            return f"record {index} cannot be read ({first_line(e)})"
        try:
            _parse_and_decode(record, label_offset)
        except tf.errors.OpError as e:
            return f"record {index}{_file_name(record)} is not a valid image example ({first_line(e)})"
        index += 1


def first_line(error) -> str:
    """The informative first line of a TensorFlow error (without its ``{{function_node ...}}`` prefix)."""
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", getattr(error, "message", str(error))).strip()
    return message.splitlines()[0][:160] if message else type(error).__name__


def _file_name(record) -> str:
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(record.numpy())
        name = example.features.feature["image/filename"].bytes_list.value
        return f" ({name[0].decode(errors='replace')})" if name else ""
    except Exception:  # a record that is not even an Example has no name to show
        return ""


def check_content(shard: Path, info: DatasetInfo) -> ShardCheck:
    """Read, parse and decode every record of ``shard``; ShardError naming the first bad one."""
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset(str(shard)).map(
        lambda record: _parse_and_decode(record, info.label_offset), num_parallel_calls=tf.data.AUTOTUNE
    )
    records, label_min, label_max = 0, None, None
    try:
        for labels, _ in dataset.batch(256):
            labels = labels.numpy()
            records += len(labels)
            low, high = int(labels.min()), int(labels.max())
            label_min = low if label_min is None else min(label_min, low)
            label_max = high if label_max is None else max(label_max, high)
    except tf.errors.OpError:
        raise ShardError(f"{shard}: {_first_problem(shard, info.label_offset)}") from None
    if records and (label_min < 0 or label_max >= info.num_classes):
        bad = label_min if label_min < 0 else label_max
        raise ShardError(
            f"{shard} holds label {bad}, but {info.data_dir / 'dataset.json'} lists "
            f"{info.num_classes} classes (labels 0..{info.num_classes - 1})"
        )
    return ShardCheck(records, label_max, True)


def _expected_examples(info: DatasetInfo, split: str) -> int:
    return info.train_examples if split == "train" else info.val_examples


def check_lengths(info: DatasetInfo, splits) -> dict[str, list[ShardCheck]]:
    """The length pass of :func:`check_dataset` over ``splits``, without TensorFlow: the shards the
    manifest vouches for by its facts (their labels checked against dataset.json), the others by their
    length fields; the counts of dataset.json. A run does it before importing TensorFlow."""
    from zoo.manifest import DataManifest

    manifest = DataManifest.read(info.data_dir)
    found = {}
    for split in splits:
        shards = [Path(p) for p in info.files(split)]
        checks = []
        for shard in shards:
            facts = manifest.lookup(shard)
            if facts and facts.get("decoded"):
                checks.append(ShardCheck(facts["records"], facts.get("label_max"), True))
            else:
                checks.append(ShardCheck(count_records(shard), None, False))
        _check_count(info, split, checks)
        _check_labels(info, split, shards, checks)
        found[split] = checks
    return found


def check_dataset(info: DatasetInfo, splits, lengths: dict | None = None) -> dict[str, list[ShardCheck]]:
    """Check the shards of ``splits`` as a run needs them (shards the manifest vouches for are
    trusted); returns the checks per split. Never writes in the data directory. ``lengths``:
    :func:`check_lengths`'s answer for ``splits`` when the run did that pass already."""
    found = check_lengths(info, splits) if lengths is None else lengths
    for split, checks in found.items():
        shards = [Path(p) for p in info.files(split)]
        decode = split == "val" or _expected_examples(info, split) <= DECODE_AT_START
        unverified = [i for i, check in enumerate(checks) if not check.decoded]
        if decode:
            for i in unverified:
                checks[i] = check_content(shards[i], info)
        elif unverified:
            print(
                f"{len(unverified)} {SPLITS[split]} shard(s) of {info.data_dir}: lengths checked, images not "
                f"decoded (scripts/download_data.sh --verify --data-dir {info.data_dir} decodes them once and "
                "records the result in manifest.json)",
                file=sys.stderr,
            )
    return found


def _check_count(info: DatasetInfo, split: str, checks: list[ShardCheck]) -> None:
    total, expected = sum(c.records for c in checks), _expected_examples(info, split)
    if total != expected:
        raise ShardError(
            f"the {SPLITS[split]} shards of {info.data_dir} hold {total} records, but dataset.json "
            f"says {expected} (a shard is missing or was cut short: convert the data again)"
        )


def _check_labels(info: DatasetInfo, split: str, shards: list[Path], checks: list[ShardCheck]) -> None:
    for shard, check in zip(shards, checks, strict=True):
        if check.label_max is not None and check.label_max >= info.num_classes:
            raise ShardError(
                f"{shard} holds label {check.label_max}, but {info.data_dir / 'dataset.json'} lists "
                f"{info.num_classes} classes (labels 0..{info.num_classes - 1})"
            )


def verify_dataset(data_dir) -> DatasetInfo:
    """Check every record of every shard of ``data_dir`` (decoding each image once) and record the
    shards in ``manifest.json``; ShardError at the first bad record, and then no manifest is written."""
    from zoo.manifest import DataManifest

    info = read_dataset_info(data_dir)
    manifest = DataManifest.read(info.data_dir)
    shards = {split: [Path(p) for p in info.files(split)] for split in SPLITS}
    for shard in (shard for split in SPLITS for shard in shards[split]):
        count_records(shard)  # every length first: a shard cut short is named before TensorFlow is imported
    for split in SPLITS:
        checks = []
        for shard in shards[split]:
            checks.append(check_content(shard, info))
            manifest.record(shard, records=checks[-1].records, label_max=checks[-1].label_max, decoded=True)
        _check_count(info, split, checks)
        print(
            f"{SPLITS[split]}: {sum(c.records for c in checks)} records, every image decodes", file=sys.stderr
        )
    manifest.write()
    return info
