"""A detector's training batches resumed inside an epoch: the sampler that starts a pass at a given batch
(EpochSampler) and an epoch's batches from batch ``start`` on, whatever the loader (epoch_batches).
A module of its own, apart from ``zoo.coco``'s names: it imports torch."""

from __future__ import annotations

import itertools

from torch.utils.data import DistributedSampler


class EpochSampler(DistributedSampler):
    """A DistributedSampler whose next pass can start at a batch (``set_epoch(epoch, start_batch)``): a
    run resumed inside an epoch reads none of the images of the batches done. The start holds for one
    pass; a later one (SSD's precise BatchNorm statistics) starts at the epoch's first batch again."""

    def __init__(self, *args, batch_size: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_size, self.start_batch = batch_size, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        super().set_epoch(epoch)
        self.start_batch = start_batch

    def __iter__(self):
        start, self.start_batch = self.start_batch, 0
        return itertools.islice(super().__iter__(), start * self.batch_size, None)


def epoch_batches(loader, epoch: int, start: int = 0):
    """``loader``'s batches of ``epoch`` (counted from 0) from batch ``start`` on: an EpochSampler leaves
    the batches done out; other loaders' batches before ``start`` (synthetic, DALI) are made and dropped,
    so that a random stream of their own goes on as in an unbroken run."""
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, EpochSampler):
        sampler.set_epoch(epoch, start)
        return iter(loader)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    return itertools.islice(iter(loader), start, None)
