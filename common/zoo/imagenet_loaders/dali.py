"""The ``dali-gpu`` / ``dali-cpu`` backends: an NVIDIA DALI pipeline (file reader, decode with random
crop on the GPU (``mixed``) or the CPU, resize, crop-mirror-normalise)."""

from __future__ import annotations

import math
import pathlib

import torch

from zoo.imagenet_loaders.folder import IMAGENET_MEAN, IMAGENET_STD, DataError, list_samples, val_resize_size


def import_dali():
    try:
        import nvidia.dali  # noqa: F401
        from nvidia.dali import fn, pipeline_def, types
    except ImportError:
        raise DataError(
            "NVIDIA DALI is not installed: pip install nvidia-dali-cuda120 (or use --data-backend pytorch)"
        ) from None
    return fn, pipeline_def, types


class DaliLoader:
    """A DALI pipeline (file reader -> decode -> crop/flip/normalise) behind the EpochLoader interface.

    DALI's reader shuffles with its own seeded generator; resume restarts the epoch's stream but
    does not reproduce the exact sample order of an unbroken run (the PyTorch backends do).
    """

    def __init__(self, cfg, split: str, classes: list[str]):
        fn, pipeline_def, types = import_dali()
        train = split == "train"
        use_gpu = cfg.backend == "dali-gpu"
        if use_gpu and not torch.cuda.is_available():
            raise DataError("--data-backend dali-gpu needs a CUDA GPU (use dali-cpu or pytorch)")
        device_id = torch.cuda.current_device() if torch.cuda.is_available() else None
        folder = str(pathlib.Path(cfg.data_dir) / split)
        samples = list_samples(pathlib.Path(folder), classes)
        files = [path for path, _ in samples]
        labels = [label for _, label in samples]
        size = cfg.image_size
        mean = [255 * m for m in IMAGENET_MEAN]
        std = [255 * s for s in IMAGENET_STD]

        @pipeline_def
        def pipeline():
            jpegs, label = fn.readers.file(
                files=files, labels=labels, random_shuffle=train, shard_id=cfg.rank,
                num_shards=cfg.world_size, pad_last_batch=not train, name="Reader", seed=cfg.seed,
            )  # fmt: skip
            decode_device = "mixed" if use_gpu else "cpu"
            if train:
                images = fn.decoders.image_random_crop(
                    jpegs, device=decode_device, output_type=types.RGB,
                    random_area=list(cfg.crop_scale), random_aspect_ratio=[3 / 4, 4 / 3],
                )  # fmt: skip
                images = fn.resize(images, resize_x=size, resize_y=size)
                mirror = fn.random.coin_flip(probability=0.5)
            else:
                images = fn.decoders.image(jpegs, device=decode_device, output_type=types.RGB)
                images = fn.resize(images, resize_shorter=val_resize_size(size))
                mirror = False
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", crop=(size, size),
                mean=mean, std=std, mirror=mirror,
            )  # fmt: skip
            if use_gpu:
                label = label.gpu()
            return images, label

        self.pipe = pipeline(
            batch_size=cfg.batch_size,
            num_threads=max(1, cfg.workers),
            device_id=device_id,
            seed=cfg.seed + cfg.rank,
        )
        self.pipe.build()
        self.train, self.size, self.device, self.channels_last = (
            train,
            len(files),
            torch.device(cfg.device),
            cfg.channels_last,
        )
        self.global_batch = cfg.batch_size * cfg.world_size
        per_shard = math.ceil(self.size / cfg.world_size)
        self.batches_per_epoch = (
            per_shard // cfg.batch_size if train else math.ceil(per_shard / cfg.batch_size)
        )
        if self.batches_per_epoch == 0:
            raise DataError(f"{self.size} images are fewer than one global batch of {self.global_batch}")
        self.samples_per_epoch = self.batches_per_epoch * self.global_batch if train else self.size

    def epoch(self, epoch: int, start_batch: int = 0):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        policy = LastBatchPolicy.DROP if self.train else LastBatchPolicy.PARTIAL
        iterator = DALIGenericIterator(
            self.pipe, ["images", "labels"], reader_name="Reader", last_batch_policy=policy, auto_reset=False
        )
        try:
            for step, batch in enumerate(iterator):
                if step >= self.batches_per_epoch:
                    break
                if step < start_batch:
                    continue
                images = batch[0]["images"].to(self.device, non_blocking=True)
                labels = batch[0]["labels"].view(-1).long().to(self.device, non_blocking=True)
                if self.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                yield images, labels
        finally:
            iterator.reset()
