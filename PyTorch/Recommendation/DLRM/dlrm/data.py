"""Criteo data: the binary shard format, the batch loader, raw-TSV preprocessing and generated sets.

A prepared dataset directory holds ``meta.json`` ({"num_dense", "num_embeddings": rows per
categorical column, ...}) and ``train/`` and ``val/`` with ``part-NNNNN.bin`` shards. A shard is a
32-byte header (b"DLRMBIN1", rows uint64, dense columns uint32, categorical columns uint32, 8 zero
bytes) followed by labels float32 [rows], dense float32 [rows, dense] (log(1 + max(x, 0))) and
categorical ids int32 [rows, categorical]. Shards are memory-mapped; a batch is a contiguous row range.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
from zoo.errors import UserError, one_line

MAGIC = b"DLRMBIN1"
META_FORMAT = "dlrm-bin-1"
# Rows of a shard read at a time when its values are checked (40 columns x 4 bytes: 160 MiB).
SCAN_ROWS = 1 << 20
HEADER_BYTES = 32
NUM_DENSE = 13
NUM_CATEGORICAL = 26
RAW_COLUMNS = 1 + NUM_DENSE + NUM_CATEGORICAL
# Multi-hot expansion: index k of a multi-hot bag is the one-hot id shifted by k * this prime (mod rows).
MULTI_HOT_STRIDE = 1_000_003


class Shard:
    """One memory-mapped shard; a bad file is a one-line UserError naming it."""

    def __init__(self, path: pathlib.Path):
        self.path = pathlib.Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            header = f.read(HEADER_BYTES)
        if len(header) < HEADER_BYTES or header[:8] != MAGIC:
            raise UserError(f"{self.path}: not a DLRM shard (bad header)")
        rows = int(np.frombuffer(header, np.uint64, 1, 8)[0])
        dense, cats = (int(v) for v in np.frombuffer(header, np.uint32, 2, 16))
        expected = HEADER_BYTES + rows * 4 * (1 + dense + cats)
        if size != expected:
            raise UserError(
                f"{self.path}: truncated or corrupt shard ({size} bytes, its header says {expected})"
            )
        self.rows, self.num_dense, self.num_categorical = rows, dense, cats
        offset = HEADER_BYTES
        self.labels = np.memmap(self.path, np.float32, "r", offset, (rows,))
        offset += rows * 4
        self.dense = np.memmap(self.path, np.float32, "r", offset, (rows, dense))
        offset += rows * dense * 4
        self.categorical = np.memmap(self.path, np.int32, "r", offset, (rows, cats))


def write_shard(path, labels: np.ndarray, dense: np.ndarray, categorical: np.ndarray) -> None:
    """Write one shard atomically."""
    from zoo.io import atomic_write

    rows = len(labels)
    header = (
        MAGIC
        + np.uint64(rows).tobytes()
        + np.array(dense.shape[1:] + categorical.shape[1:], np.uint32).tobytes()
    )
    header += b"\0" * (HEADER_BYTES - len(header))
    with atomic_write(path) as tmp, open(tmp, "wb") as f:
        f.write(header)
        f.write(np.ascontiguousarray(labels, np.float32).tobytes())
        f.write(np.ascontiguousarray(dense, np.float32).tobytes())
        f.write(np.ascontiguousarray(categorical, np.int32).tobytes())


def read_meta(data_dir) -> dict:
    """The data folder's meta.json, checked: JSON of this format, ``num_dense`` a count, ``num_embeddings``
    a list of positive table sizes; a UserError naming the file otherwise."""
    path = pathlib.Path(data_dir) / "meta.json"
    if not path.parent.is_dir():
        raise UserError(f"data dir {path.parent} does not exist")
    if not path.is_file():
        raise UserError(f"{path} not found: prepare the data with scripts/download_data.sh (or --synthetic)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path} is not JSON ({one_line(e)}): prepare the data again") from None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise UserError(f"{path} is not a {META_FORMAT} description: prepare the data again")
    tables, dense = meta.get("num_embeddings"), meta.get("num_dense")
    if not isinstance(tables, list) or not tables or not all(_is_count(rows, 1) for rows in tables):
        raise UserError(f"{path}: num_embeddings must be a list of table sizes (positive integers)")
    if not _is_count(dense, 0):
        raise UserError(f"{path}: num_dense must be an integer >= 0, not {dense!r}")
    return meta


def _is_count(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def write_meta(data_dir, num_embeddings: list[int], **extra) -> None:
    from zoo.io import atomic_write

    meta = {"format": META_FORMAT, "num_dense": NUM_DENSE, "num_embeddings": list(num_embeddings), **extra}
    with atomic_write(pathlib.Path(data_dir) / "meta.json") as tmp:
        tmp.write_text(json.dumps(meta, indent=1) + "\n")


def values_problem(shard: Shard) -> str | None:
    """What is wrong with the values of ``shard`` (a label other than 0 or 1, a dense feature that is not
    finite, a negative categorical id), naming the first bad row; None when nothing is. Reads the shard
    in blocks of SCAN_ROWS rows."""
    for start in range(0, shard.rows, SCAN_ROWS):
        stop = min(start + SCAN_ROWS, shard.rows)
        labels = np.asarray(shard.labels[start:stop])
        bad = (labels != 0) & (labels != 1)
        if bad.any():
            row = int(np.argmax(bad))
            return f"row {start + row} has the label {labels[row]:g} (labels are 0 or 1)"
        finite = np.isfinite(shard.dense[start:stop]).all(axis=1)
        if not finite.all():
            return f"row {start + int(np.argmin(finite))} has a dense feature that is not a finite number"
        negative = (shard.categorical[start:stop] < 0).any(axis=1)
        if negative.any():
            return f"row {start + int(np.argmax(negative))} has a negative categorical id"
    return None


def record_checked_shards(data_dir) -> None:
    """Enter every shard of ``data_dir`` in its manifest.json as checked (:func:`values_problem` found
    nothing): training and evaluation then trust them while they stay unchanged, instead of reading
    every row before each run. Called by the preparation that wrote them."""
    from zoo.manifest import DataManifest

    manifest = DataManifest.read(data_dir)
    for path in sorted(pathlib.Path(data_dir).glob("*/part-*.bin")):
        shard = Shard(path)
        problem = values_problem(shard)
        if problem:
            raise UserError(f"{path}: {problem}")
        manifest.record(path, rows=shard.rows, values="checked")
    manifest.write()


class Split:
    """The shards of one split; ``batch(start, stop)`` returns rows [start, stop) as numpy arrays.

    With ``meta`` (:func:`read_meta`) each shard must have the columns it names, and its values must pass
    :func:`values_problem` unless the data folder's manifest vouches for the unchanged shard: a UserError
    naming the shard otherwise, before a run writes anything."""

    def __init__(self, data_dir, split: str, meta: dict | None = None):
        folder = pathlib.Path(data_dir) / split
        paths = sorted(folder.glob("part-*.bin"))
        if not paths:
            raise UserError(f"no shards in {folder}: prepare the data with scripts/download_data.sh")
        self.shards = [Shard(p) for p in paths]
        if meta is not None:
            self._check(data_dir, meta)
        self.starts = np.cumsum([0] + [s.rows for s in self.shards])
        self.rows = int(self.starts[-1])

    def _check(self, data_dir, meta: dict) -> None:
        from zoo.manifest import DataManifest

        manifest = DataManifest.read(data_dir)
        tables, dense = len(meta["num_embeddings"]), meta["num_dense"]
        for shard in self.shards:
            if (shard.num_dense, shard.num_categorical) != (dense, tables):
                raise UserError(
                    f"{shard.path} has {shard.num_dense} dense and {shard.num_categorical} categorical "
                    f"columns, but meta.json names {dense} and {tables} tables: prepare the data again"
                )
            if (manifest.lookup(shard.path) or {}).get("values") != "checked":
                problem = values_problem(shard)
                if problem:
                    raise UserError(f"{shard.path}: {problem}")

    def batch(self, start: int, stop: int):
        first = self.shards[0]
        labels = [np.zeros(0, np.float32)]
        dense = [np.zeros((0, first.num_dense), np.float32)]
        cats = [np.zeros((0, first.num_categorical), np.int32)]
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < stop:
            shard = self.shards[i]
            lo = start - int(self.starts[i])
            hi = min(shard.rows, stop - int(self.starts[i]))
            labels.append(shard.labels[lo:hi])
            dense.append(shard.dense[lo:hi])
            cats.append(shard.categorical[lo:hi])
            start += hi - lo
            i += 1
        return np.concatenate(labels), np.concatenate(dense), np.concatenate(cats)


def expand_categorical(cats: np.ndarray, rows: list[int], hotness: list[int]) -> np.ndarray:
    """One-hot ids [B, tables] -> the model's int64 [B, sum(hotness)]: ids modulo the table's rows,
    and for a multi-hot table its bag (id + k * MULTI_HOT_STRIDE) mod rows, k < hotness."""
    cats = cats.astype(np.int64)
    if cats.size and (cats < 0).any():
        raise UserError("negative categorical id in the data: the shards are corrupt")
    columns = []
    for t, (n, hot) in enumerate(zip(rows, hotness, strict=True)):
        base = cats[:, t : t + 1]
        columns.append((base + np.arange(hot, dtype=np.int64) * MULTI_HOT_STRIDE) % n)
    return np.concatenate(columns, axis=1)


class Batches:
    """The batches one rank reads from a split: global batch g covers rows [g*G, (g+1)*G) (batch
    order shuffled per epoch when ``shuffle``), and rank r takes its r-th slice of B = G / world rows.

    A last partial global batch is padded to G with ``weight`` 0 rows, so every rank gets B rows
    (sharded embeddings need equal batches); ``weight`` is 1 for real rows.
    """

    def __init__(
        self,
        split: Split,
        global_batch: int,
        rank: int,
        world: int,
        rows,
        hotness,
        *,
        drop_last,
        shuffle=False,
        seed=0,
    ):
        if global_batch % world:
            raise UserError(f"global batch {global_batch} is not a multiple of {world} processes")
        self.split, self.global_batch, self.rank, self.world = split, global_batch, rank, world
        self.local = global_batch // world
        self.rows, self.hotness = rows, hotness
        self.shuffle, self.seed = shuffle, seed
        self.count = split.rows // global_batch if drop_last else math.ceil(split.rows / global_batch)
        if self.count == 0:
            raise UserError(f"{split.rows} rows are fewer than one global batch of {global_batch}")

    def order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.count)
        return np.random.default_rng([self.seed, epoch]).permutation(self.count)

    def get(self, index: int):
        """Global batch ``index``'s slice for this rank: (labels, dense, sparse, weight) torch tensors."""
        import torch

        start = index * self.global_batch + self.rank * self.local
        stop = min(start + self.local, self.split.rows)
        labels, dense, cats = self.split.batch(start, max(start, stop))
        real = len(labels)
        if real < self.local:
            pad = self.local - real
            labels = np.concatenate([labels, np.zeros(pad, np.float32)])
            dense = np.concatenate([dense, np.zeros((pad, dense.shape[1]), np.float32)])
            cats = np.concatenate([cats, np.zeros((pad, cats.shape[1]), np.int32)])
        weight = np.zeros(self.local, np.float32)
        weight[:real] = 1
        sparse = expand_categorical(cats, self.rows, self.hotness)
        return (
            torch.from_numpy(np.array(labels)),
            torch.from_numpy(np.array(dense)),
            torch.from_numpy(sparse),
            torch.from_numpy(weight),
        )


# ---------------------------------------------------------------- raw Criteo TSV -> shards


def parse_lines(lines: list[str], where: str, first_line: int):
    """Criteo TSV lines (label, 13 integer, 26 hex fields; empty = missing) -> (labels, dense, hex
    strings [n, 26]). A malformed line is a one-line UserError naming file and line."""
    n = len(lines)
    labels = np.empty(n, np.float32)
    dense = np.zeros((n, NUM_DENSE), np.float32)
    cats = []
    for i, line in enumerate(lines):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != RAW_COLUMNS:
            raise UserError(
                f"{where}:{first_line + i}: {len(fields)} tab-separated columns, Criteo has {RAW_COLUMNS}"
            )
        try:
            labels[i] = float(fields[0]) if fields[0] else 0.0
            for j, value in enumerate(fields[1 : 1 + NUM_DENSE]):
                if value:
                    dense[i, j] = float(int(value))
        except ValueError:
            raise UserError(f"{where}:{first_line + i}: non-numeric label or dense field") from None
        cats.append(fields[1 + NUM_DENSE :])
    bad = (labels != 0) & (labels != 1)
    if bad.any():
        line = int(np.argmax(bad))
        raise UserError(f"{where}:{first_line + line}: label {labels[line]:g}, Criteo's labels are 0 or 1")
    np.log1p(np.maximum(dense, 0), out=dense)
    return labels, dense, cats


def hex_id(value: str, where: str) -> int:
    try:
        return int(value, 16) if value else 0
    except ValueError:
        raise UserError(f"{where}: categorical field {value!r} is not hexadecimal") from None
