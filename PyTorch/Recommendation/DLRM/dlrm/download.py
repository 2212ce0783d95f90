"""Prepare Criteo data: ``python -m dlrm.download --data-dir D (--raw-dir R | --synthetic)``.

Criteo's terms require accepting a licence, so the raw files are the user's to fetch: the 1TB
Click Logs (``day_0`` .. ``day_23``, optionally ``.gz``, from https://ailab.criteo.com/ressources/)
or the Kaggle Display Advertising Challenge ``train.txt``. This tool checks and preprocesses them:
dense features -> log(1 + max(x, 0)), categorical hex ids -> frequency-thresholded vocabulary ids
(``--categorical threshold``, ids seen fewer than ``--threshold`` times in training become 0) or
hashed ids (``--categorical hash``, modulo ``--hash-rows``), split by day (the last day validates;
Kaggle: the last 1/7 of the lines), written as binary shards (dlrm.data). ``--synthetic`` writes a
generated set with a planted click model in the same format, no download.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import pathlib
import shutil

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.io import atomic_write

from dlrm.data import (
    NUM_CATEGORICAL,
    NUM_DENSE,
    hex_id,
    parse_lines,
    record_checked_shards,
    write_meta,
    write_shard,
)

SHARD_ROWS = 1 << 20


def planted_rows(n: int, seed: int, vocab: int = 64):
    """Rows of a generated Criteo-like set: (labels, dense counts [n, 13] int, categorical values
    [n, 26] int in [0, vocab)). Clicks follow a planted model: per-value effects of tables 0-3 and
    dense column 0, so a model that learns them reaches an AUC far above 0.5."""
    rng = np.random.default_rng(seed)
    dense = rng.poisson(rng.uniform(0.5, 20, NUM_DENSE), size=(n, NUM_DENSE)).astype(np.int64)
    popularity = 1.0 / np.arange(1, vocab + 1)
    cats = rng.choice(vocab, size=(n, NUM_CATEGORICAL), p=popularity / popularity.sum())
    effects = np.random.default_rng(12345).normal(0, 1.5, size=(4, vocab))
    logit = -1.0 + effects[np.arange(4), cats[:, :4]].sum(1) + 0.8 * (np.log1p(dense[:, 0]) - 1.5)
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return labels, dense, cats


def hex_of(values: np.ndarray, column: int) -> list[str]:
    return [f"{(int(v) * 2654435761 + column * 97) % 2**32:08x}" for v in values]


def write_raw_tsv(path, n: int, seed: int) -> None:
    """A generated set in Criteo's raw TSV format (for tests and demos of the preprocessing path)."""
    labels, dense, cats = planted_rows(n, seed)
    hexes = [hex_of(cats[:, c], c) for c in range(NUM_CATEGORICAL)]
    with atomic_write(path) as tmp, open(tmp, "w") as f:
        for i in range(n):
            fields = (
                [str(int(labels[i]))]
                + [str(int(v)) for v in dense[i]]
                + [hexes[c][i] for c in range(NUM_CATEGORICAL)]
            )
            f.write("\t".join(fields) + "\n")


def write_synthetic(data_dir, train_rows: int, val_rows: int, seed: int = 0, vocab: int = 64) -> None:
    """A generated set with the planted click model, directly as shards (ids = value + 1, 0 missing)."""
    data_dir = pathlib.Path(data_dir)
    for split, rows, split_seed in (("train", train_rows, seed), ("val", val_rows, seed + 1)):
        labels, dense, cats = planted_rows(rows, split_seed, vocab)
        (data_dir / split).mkdir(parents=True, exist_ok=True)
        for part, start in enumerate(range(0, rows, SHARD_ROWS)):
            stop = min(start + SHARD_ROWS, rows)
            write_shard(
                data_dir / split / f"part-{part:05d}.bin",
                labels[start:stop],
                np.log1p(dense[start:stop]).astype(np.float32),
                cats[start:stop] + 1,
            )
    write_meta(
        data_dir, [vocab + 1] * NUM_CATEGORICAL, source="synthetic", train_rows=train_rows, val_rows=val_rows
    )
    record_checked_shards(data_dir)


def _open(path: pathlib.Path):
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path)


def raw_files(raw_dir) -> tuple[list[pathlib.Path], list[pathlib.Path] | None]:
    """(day files in order, None) for the 1TB set, ([train.txt], None) for Kaggle."""
    raw_dir = pathlib.Path(raw_dir)
    days = sorted(
        (p for p in raw_dir.glob("day_*") if p.name.split(".")[0][4:].isdigit()),
        key=lambda p: int(p.name.split(".")[0][4:]),
    )
    if days:
        return days, None
    if (raw_dir / "train.txt").is_file():
        return [raw_dir / "train.txt"], None
    raise UserError(
        f"no Criteo files in {raw_dir}: put day_0 .. day_23 (Criteo 1TB) or train.txt (Kaggle) there; "
        "Criteo's licence requires downloading them yourself"
    )


def _chunks(files, chunk: int):
    """(file, first line number, lines) chunks over ``files``."""
    for path in files:
        with _open(path) as f:
            line_no, lines = 1, []
            for line in f:
                lines.append(line)
                if len(lines) == chunk:
                    yield path, line_no, lines
                    line_no += len(lines)
                    lines = []
            if lines:
                yield path, line_no, lines


def preprocess(
    raw_dir, data_dir, *, categorical: str, threshold: int, hash_rows: int, chunk: int = 1 << 18
) -> None:
    """Raw Criteo TSV files -> shards + meta.json in ``data_dir`` (see the module docstring)."""
    files, _ = raw_files(raw_dir)
    data_dir = pathlib.Path(data_dir)
    if len(files) > 1:
        train_files, val_files, val_from_line = files[:-1], files[-1:], None
    else:
        with _open(files[0]) as f:
            total = sum(1 for _ in f)
        train_files, val_files, val_from_line = files, files, total - total // 7 + 1
    vocab = None
    if categorical == "threshold":
        counts = [collections.Counter() for _ in range(NUM_CATEGORICAL)]
        for path, first, lines in _chunks(train_files, chunk):
            _, _, cats = parse_lines(lines, str(path), first)
            if val_from_line is not None:
                cats = cats[: max(0, val_from_line - first)]
            for row in cats:
                for c, value in enumerate(row):
                    if value:
                        counts[c][value] += 1
        vocab = [
            {value: i + 1 for i, value in enumerate(sorted(v for v, n in col.items() if n >= threshold))}
            for col in counts
        ]
        rows = [len(v) + 1 for v in vocab]
    elif categorical == "hash":
        rows = [hash_rows] * NUM_CATEGORICAL
    else:
        raise UserError(f"--categorical must be threshold or hash, not {categorical!r}")

    def ids(cats, where):
        out = np.zeros((len(cats), NUM_CATEGORICAL), np.int32)
        for i, row in enumerate(cats):
            for c, value in enumerate(row):
                if not value:
                    continue
                if vocab is not None:
                    out[i, c] = vocab[c].get(value, 0)
                else:
                    out[i, c] = 1 + hex_id(value, where) % (hash_rows - 1)
        return out

    counts_out = {}
    for split, split_files in (("train", train_files), ("val", val_files)):
        folder = data_dir / split
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        part = written = 0
        for path, first, lines in _chunks(split_files, chunk):
            labels, dense, cats = parse_lines(lines, str(path), first)
            if val_from_line is not None:
                keep = (
                    slice(0, max(0, val_from_line - first))
                    if split == "train"
                    else slice(max(0, val_from_line - first), None)
                )
                labels, dense, cats = labels[keep], dense[keep], cats[keep]
            if not len(labels):
                continue
            write_shard(folder / f"part-{part:05d}.bin", labels, dense, ids(cats, f"{path}:{first}"))
            part += 1
            written += len(labels)
        counts_out[f"{split}_rows"] = written
    write_meta(
        data_dir, rows, source=str(raw_dir), categorical=categorical, threshold=threshold, **counts_out
    )
    record_checked_shards(data_dir)


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="scripts/download_data.sh", description=__doc__.split("\n\n")[0])
    import os

    parser.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="where the prepared set goes ($DATA_DIR)"
    )
    parser.add_argument(
        "--raw-dir", help="folder with day_0..day_23 (Criteo 1TB) or train.txt (Kaggle), fetched by you"
    )
    parser.add_argument(
        "--synthetic", action="store_true", help="write a generated set instead (no download)"
    )
    parser.add_argument("--train-rows", type=int, default=200_000, help="--synthetic: training rows")
    parser.add_argument("--val-rows", type=int, default=50_000, help="--synthetic: validation rows")
    parser.add_argument("--categorical", choices=("threshold", "hash"), default="threshold")
    parser.add_argument(
        "--threshold", type=int, default=15, help="keep ids seen at least this often (MLPerf: 15)"
    )
    parser.add_argument(
        "--hash-rows", type=int, default=40_000_000, help="rows per table with --categorical hash"
    )
    args = parser.parse_args(argv)
    if not args.data_dir:
        raise UserError("give --data-dir (or set DATA_DIR)")
    if args.synthetic:
        write_synthetic(args.data_dir, args.train_rows, args.val_rows)
    elif args.raw_dir:
        preprocess(
            args.raw_dir,
            args.data_dir,
            categorical=args.categorical,
            threshold=args.threshold,
            hash_rows=args.hash_rows,
        )
    else:
        raise UserError("give --raw-dir with the Criteo files you downloaded, or --synthetic")
    print(f"prepared {args.data_dir}")


if __name__ == "__main__":
    main()
