"""The ``synthetic`` backend: one random batch made once on the device (measures the model, not the input)."""

from __future__ import annotations

import torch


class SyntheticLoader:
    """One random batch created on the device, served ``batches_per_epoch`` times."""

    def __init__(self, cfg, batches_per_epoch: int = 100):
        generator = torch.Generator().manual_seed(cfg.seed)
        images = torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, generator=generator)
        labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator)
        self.images, self.labels = images.to(cfg.device), labels.to(cfg.device)
        if cfg.channels_last:
            self.images = self.images.contiguous(memory_format=torch.channels_last)
        self.batches_per_epoch = batches_per_epoch
        self.global_batch = cfg.batch_size * cfg.world_size
        self.samples_per_epoch = batches_per_epoch * self.global_batch

    def epoch(self, epoch: int, start_batch: int = 0):
        for _ in range(start_batch, self.batches_per_epoch):
            yield self.images, self.labels
