"""Pretraining batches for TensorFlow from the shared sample shards (``zoo.data.bert``, the format the
PyTorch BERT reads too), and random batches for ``--synthetic`` runs and benchmarks.

Micro-batch ``index`` of a run is a function of the index alone: epoch = index // batches per epoch,
rows from the epoch's block-shuffled stream, this replica's slice of the global batch, dynamic masks
drawn from (seed, epoch, sample). So a resumed run reads exactly what the unbroken run would have, and
N replicas read the N slices of one global batch.
"""

from __future__ import annotations

import numpy as np
from zoo.errors import UserError


def open_pretraining_data(data_dir, seed: int = 0):
    """The prepared directory (shards + metadata.json) as ``zoo.data.bert.PretrainingData``."""
    from zoo.data.bert import PretrainingData

    return PretrainingData(data_dir, seed=seed)


def collate(rows: list[dict], *, nsp: bool) -> dict[str, np.ndarray]:
    """int32 arrays of one micro-batch; padding of mlm_labels / nsp_labels stays -1 (ignored by the losses)."""

    def stack(name):
        return np.stack([r[name] for r in rows]).astype(np.int32)

    batch = {
        "input_ids": stack("input_ids"),
        "token_type_ids": stack("token_type_ids"),
        "seq_ids": stack("seq_ids"),
        "mlm_positions": stack("mlm_positions"),
        "mlm_labels": stack("mlm_labels"),
    }
    if nsp:
        batch["cls_positions"] = np.maximum(stack("cls_positions"), 0)
        batch["nsp_labels"] = stack("nsp_labels")
    return batch


class MicroBatches:
    """Micro-batch ``index`` of the run for one replica of ``world_size`` (module docstring)."""

    def __init__(self, data, batch_size: int, *, rank: int = 0, world_size: int = 1):
        self.data, self.batch_size, self.rank = data, batch_size, rank
        self.global_batch = batch_size * world_size
        self.per_epoch = len(data) // self.global_batch
        if self.per_epoch == 0:
            raise UserError(
                f"{len(data)} samples in {data.dir} are fewer than one global batch of {self.global_batch}"
            )

    def __call__(self, index: int) -> dict[str, np.ndarray]:
        epoch, in_epoch = divmod(index, self.per_epoch)
        first = in_epoch * self.global_batch + self.rank * self.batch_size
        rows = [self.data.sample(epoch, first + i) for i in range(self.batch_size)]
        return collate(rows, nsp=self.data.spec.nsp)


class SyntheticMicroBatches:
    """Random full-length single-sequence micro-batches of fixed shapes (benchmarks, smoke runs)."""

    def __init__(self, batch_size: int, max_seq: int, max_predictions: int, vocab_size: int, seed: int = 0):
        self.shape = (batch_size, max_seq, max_predictions)
        self.vocab_size, self.seed = vocab_size, seed

    def __call__(self, index: int) -> dict[str, np.ndarray]:
        batch, length, predictions = self.shape
        rng = np.random.default_rng([self.seed, index])
        positions = np.sort(np.argsort(rng.random((batch, length - 2)), axis=1)[:, :predictions] + 1, axis=1)
        return {
            "input_ids": rng.integers(5, self.vocab_size, (batch, length), dtype=np.int32),
            "token_type_ids": np.zeros((batch, length), np.int32),
            "seq_ids": np.ones((batch, length), np.int32),
            "mlm_positions": positions.astype(np.int32),
            "mlm_labels": rng.integers(5, self.vocab_size, (batch, predictions), dtype=np.int32),
        }


def stacked(micro_batches, first: int, count: int) -> dict[str, np.ndarray]:
    """Micro-batches first..first+count-1 stacked on a leading axis (one optimizer step's worth)."""
    parts = [micro_batches(first + k) for k in range(count)]
    return {name: np.stack([p[name] for p in parts]) for name in parts[0]}


def eval_batches(data, count: int, batch_size: int) -> list[dict[str, np.ndarray]]:
    """The first ``count`` samples of epoch 0 (masks drawn as in training), in batches."""
    count = min(count, len(data))
    return [
        collate([data.sample(0, i) for i in range(first, min(first + batch_size, count))], nsp=data.spec.nsp)
        for first in range(0, count, batch_size)
    ]
