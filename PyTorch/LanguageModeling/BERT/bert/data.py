"""PyTorch batches of the shared pretraining samples (``zoo.data.bert``: sample creation, packing,
masking, shards, the data-preparation command line; the TensorFlow BERT reads the same shards).

``PretrainingBatches`` item ``step`` is this rank's slice of global batch ``step`` (exact resume,
independent of loader workers); ``SyntheticBatches`` gives random full-length samples; ``SquadBatches``
item ``k`` is this rank's k-th micro-batch of SQuAD windows, shuffled per epoch.
"""

from __future__ import annotations

import numpy as np
import torch
from zoo.data.bert import PretrainingData, SampleSpec, ShardError
from zoo.errors import UserError

__all__ = [
    "PretrainingBatches", "PretrainingData", "SampleSpec", "ShardError", "SquadBatches", "SyntheticBatches", "collate",
]  # fmt: skip


class PretrainingBatches(torch.utils.data.Dataset):
    """Item `step` = this rank's slice of the global batch number `step` of the run.

    Steps run across epochs (step // steps_per_epoch is the epoch), so resuming at a step is exact
    and independent of the number of loader workers.
    """

    def __init__(self, data: PretrainingData, batch_size: int, *, rank: int = 0, world_size: int = 1):
        self.data, self.batch_size, self.rank, self.world_size = data, batch_size, rank, world_size
        self.global_batch = batch_size * world_size
        self.steps_per_epoch = len(data) // self.global_batch
        if self.steps_per_epoch == 0:
            raise UserError(
                f"{len(data)} samples in {data.dir} are fewer than one global batch of {self.global_batch}"
            )

    def __len__(self) -> int:
        return 1 << 40  # endless; the training loop decides when to stop

    def __getitem__(self, step: int) -> dict[str, torch.Tensor]:
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        first = in_epoch * self.global_batch + self.rank * self.batch_size
        rows = [self.data.sample(epoch, first + i) for i in range(self.batch_size)]
        return collate(rows, nsp=self.data.spec.nsp)


def collate(rows: list[dict], *, nsp: bool) -> dict[str, torch.Tensor]:
    def stack(name, dtype=np.int64):
        return torch.from_numpy(np.stack([r[name] for r in rows]).astype(dtype))

    cls_positions = stack("cls_positions")
    mlm_labels = stack("mlm_labels")
    batch = {
        "input_ids": stack("input_ids"),
        "token_type_ids": stack("token_type_ids"),
        "seq_ids": stack("seq_ids"),
        "mlm_positions": stack("mlm_positions"),
        "mlm_labels": mlm_labels.masked_fill_(mlm_labels < 0, -100),
        "sequences": (cls_positions >= 0).sum(),
    }
    if nsp:
        labels = stack("nsp_labels")
        batch["cls_positions"] = cls_positions.clamp_(min=0)
        batch["nsp_labels"] = labels.masked_fill_(labels < 0, -100)
    return batch


class SyntheticBatches(torch.utils.data.Dataset):
    """Random full-length single-sequence samples of fixed shapes (benchmarks, smoke tests); no
    seq_ids, so attention runs without a mask (the flash kernels)."""

    def __init__(self, batch_size: int, spec: SampleSpec, vocab_size: int, seed: int = 0):
        self.batch_size, self.spec, self.vocab_size, self.seed = batch_size, spec, vocab_size, seed

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, step: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        b, t, p = self.batch_size, self.spec.max_seq, self.spec.max_predictions
        positions = torch.stack([torch.randperm(t - 2, generator=g)[:p] + 1 for _ in range(b)]).sort(1).values
        return {
            "input_ids": torch.randint(5, self.vocab_size, (b, t), generator=g),
            "token_type_ids": torch.zeros(b, t, dtype=torch.long),
            "mlm_positions": positions,
            "mlm_labels": torch.randint(5, self.vocab_size, (b, p), generator=g),
            "sequences": torch.tensor(b),
        }


class SquadBatches(torch.utils.data.Dataset):
    """Item ``k`` = this rank's k-th micro-batch of SQuAD training windows (``zoo.data.squad.Features``):
    each epoch shuffles the windows from (seed, epoch) and deals them out a global batch at a time, so
    a micro-batch is a function of its number."""

    COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")

    def __init__(self, features, batch_size: int, seed: int, *, rank: int = 0, world_size: int = 1):
        self.arrays = {k: torch.from_numpy(getattr(features, k)) for k in self.COLUMNS}
        self.count, self.batch_size, self.seed = len(features), batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.per_epoch = self.count // (batch_size * world_size)
        if self.per_epoch == 0:
            raise UserError(
                f"{self.count} training windows are fewer than one global batch of {batch_size * world_size}"
            )
        self._order = (None, None)  # (epoch, its permutation)

    def __len__(self) -> int:
        return 1 << 40  # endless; the training loop decides when to stop

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        epoch, in_epoch = divmod(index, self.per_epoch)
        if self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.count))
        first = (in_epoch * self.world_size + self.rank) * self.batch_size
        rows = torch.from_numpy(self._order[1][first : first + self.batch_size])
        return {**{k: v[rows] for k, v in self.arrays.items()}, "sequences": torch.tensor(len(rows))}
