"""The data: a prepared split on disk (or synthetic samples) served as the batches of each rank.

The skeleton's dataset is scikit-learn's 8x8 digits (1,797 real handwritten digits, shipped with the
package), prepared into DATA_DIR/digits.npz. A model with a dataset on the web downloads it in
``prepare`` through ``zoo.io.download(url, sha256=..., dest=...)`` (resumed, verified, then moved into
place) and writes what training reads with ``zoo.io.atomic_write``.

    python -m skeleton.data --data-dir data/skeleton      # what scripts/download_data.sh runs
"""

from __future__ import annotations

import argparse
import pathlib
import zipfile
from typing import TYPE_CHECKING

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError, one_line
from zoo.io import atomic_write

if TYPE_CHECKING:
    import torch

FILE_NAME = "digits.npz"
FEATURES, CLASSES = 64, 10
SPLITS = ("train", "val")


def prepare(data_dir, *, val_fraction: float = 0.2, seed: int = 0) -> pathlib.Path:
    """Write DATA_DIR/digits.npz (x_train, y_train, x_val, y_val) whole or not at all."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    cut = round(len(order) * val_fraction)
    val, train = order[:cut], order[cut:]
    x = digits.data.astype(np.float32)
    path = pathlib.Path(data_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, x_train=x[train], y_train=digits.target[train], x_val=x[val], y_val=digits.target[val])
    return path


def load_split(data_dir, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs [N, 64] float32, labels [N] int64) of ``split``; a UserError naming the file when it is
    missing or not a prepared split."""
    import torch

    path = pathlib.Path(data_dir) / FILE_NAME
    if not path.is_file():
        raise UserError(f"{path} does not exist: scripts/download_data.sh --data-dir {data_dir} prepares it")
    try:
        with np.load(path) as arrays:
            x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise UserError(f"{path} is not a prepared split ({one_line(e)}): prepare it again") from None
    if x.ndim != 2 or x.shape[1] != FEATURES or len(x) != len(y) or len(y) == 0:
        raise UserError(
            f"{path}: {split} holds {x.shape} inputs and {y.shape} labels, not [N, {FEATURES}] and [N]"
        )
    if y.min() < 0 or y.max() >= CLASSES:
        raise UserError(f"{path}: {split} labels outside 0..{CLASSES - 1}")
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(y.astype(np.int64))


def synthetic_split(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs of the real shapes (no download): for speed runs and the benchmark."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(samples, FEATURES, generator=generator) * 16
    return x, torch.randint(0, CLASSES, (samples,), generator=generator)


class Batches:
    """A split as the batches of one rank: every epoch a new order (seeded by ``seed`` and the epoch),
    each rank its own share, the same on every run; ``epoch(e, start)`` begins at batch ``start``, so a
    resumed run sees exactly the batches an unbroken run would have."""

    def __init__(self, x, y, batch_size: int, *, rank=0, world_size=1, seed=0, shuffle=True, device="cpu"):
        self.x, self.y, self.batch_size = x, y, batch_size
        self.rank, self.world_size, self.seed, self.shuffle, self.device = (
            rank,
            world_size,
            seed,
            shuffle,
            device,
        )
        self.batches_per_epoch = len(y) // (batch_size * world_size) if shuffle else -(-len(y) // batch_size)
        if self.batches_per_epoch == 0:
            raise UserError(f"{len(y)} samples make no batch of {batch_size} x {world_size} process(es)")

    def epoch(self, epoch: int, start: int = 0):
        import torch

        if not self.shuffle:  # evaluation: every sample once, rank r takes every world_size-th batch
            for b in range(self.rank, self.batches_per_epoch, self.world_size):
                part = slice(b * self.batch_size, (b + 1) * self.batch_size)
                yield self.x[part].to(self.device), self.y[part].to(self.device)
            return
        order = torch.randperm(len(self.y), generator=torch.Generator().manual_seed(self.seed * 1000 + epoch))
        for b in range(start, self.batches_per_epoch):
            first = (b * self.world_size + self.rank) * self.batch_size
            index = order[first : first + self.batch_size]
            yield self.x[index].to(self.device), self.y[index].to(self.device)


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m skeleton.data", description="Prepare the dataset in DATA_DIR."
    )
    p.add_argument("--data-dir", required=True, help="where the prepared split goes ($DATA_DIR)")
    args = p.parse_args(argv)
    print(f"wrote {prepare(args.data_dir)}")


if __name__ == "__main__":
    main()
