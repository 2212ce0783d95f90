"""PyTorch input pipelines for ImageNet-style image folders: ``data_dir/{train,val}/<class>/*.jpg``.

Shared by the PyTorch image classifiers (ResNet-50, EfficientNet).

Backends (``--data-backend``, recipe key ``data.backend``), one module each:

- ``pytorch`` (``folder.py``): torchvision transforms + PIL decode in DataLoader workers, pinned memory.
- ``gpu-decode`` (``gpu_decode.py``): workers only read JPEG bytes; ``torchvision.io.decode_jpeg``
  decodes the whole batch on the device (nvJPEG on CUDA), then crop, flip and normalise run there too,
  two batches ahead in a background thread.
- ``dali-gpu`` / ``dali-cpu`` (``dali.py``): an NVIDIA DALI pipeline (decode on GPU via ``mixed``, or on CPU).
- ``synthetic`` (``synthetic.py``): one random batch created once on the device (measures the model,
  not the input).

Training augmentation (all backends): random-resized crop, horizontal flip, normalisation with the
ImageNet mean/std; the ``pytorch`` backend can add RandAugment or AutoAugment (``augment``, recipe
key ``data.augment``) between the crop and the normalisation. Validation: resize the short side to ``image_size * 256 / 224``, centre crop; or,
for a registry checkpoint, the entry's preprocessing (``DataConfig.val_preprocessing``: resize, crop,
interpolation, mean, std; applied by the ``pytorch`` backend).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from zoo.checkpoints import Preprocessing
from zoo.recipe import flag as recipe_flag
from zoo.recipe import run_config

BACKENDS = ("pytorch", "gpu-decode", "dali-gpu", "dali-cpu", "synthetic")
AUGMENTATIONS = (None, "randaugment", "autoaugment")

__all__ = [
    "AUGMENTATIONS", "BACKENDS", "IMAGE_EXTENSIONS", "IMAGENET_MEAN", "IMAGENET_STD", "DataConfig", "DataError",
    "EpochLoader", "ShardedSampler", "SyntheticLoader", "build_loader", "check_layout", "crop_resize",
    "default_preprocessing", "eval_transform", "list_samples", "one_line", "val_resize_size",
]  # fmt: skip

# The loaders import torch (and DALI); they load on first use, so that a script's --help and its parser's
# choices (BACKENDS) need no framework.
_LAZY = {
    "DaliLoader": "dali",
    "SyntheticLoader": "synthetic",
    "build_gpu_decode_loader": "gpu_decode",
    "crop_resize": "gpu_decode",
    **{
        name: "folder"
        for name in (
            "IMAGE_EXTENSIONS", "IMAGENET_MEAN", "IMAGENET_STD", "EpochLoader", "ShardedSampler",
            "build_folder_loader", "default_preprocessing", "eval_transform", "list_samples", "one_line",
            "val_resize_size",
        )
    },
    # the layout checks need no framework: a training script runs them before it imports torch
    "DataError": "layout",
    "check_layout": "layout",
}  # fmt: skip


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


@dataclass
class DataConfig:
    """What a loader needs: the folder, the backend, the batch and crop, this process's shard."""

    data_dir: str | None
    backend: str = "pytorch"
    batch_size: int = 256  # per process
    image_size: int = 224
    workers: int = 8
    crop_scale: tuple[float, float] = (0.08, 1.0)
    num_classes: int = 1000
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    channels_last: bool = False
    synthetic_batches: int = 100  # synthetic backend: training batches per epoch (there is no data set)
    val_preprocessing: Preprocessing | None = None  # validation resize/crop/mean/std (default: 256/224)
    augment: str | None = None  # None | "randaugment" | "autoaugment" (pytorch backend only)

    @classmethod
    def from_recipe(
        cls,
        recipe: dict,
        device,
        *,
        accumulation: int,
        data_dir=None,
        rank=0,
        world_size=1,
        synthetic_batches=100,
    ):
        """The training input of a recipe: its data: section, and batches of one optimizer step on one of
        ``world_size`` GPUs (batch per GPU x ``accumulation`` images; the validation loader takes
        batch_per_gpu). ``data.augment``, where the recipe has it, names the extra augmentation."""
        data, run = recipe["data"], run_config(recipe)
        return cls(
            data_dir, backend=data["backend"], batch_size=run.batch_per_gpu * accumulation,
            image_size=int(data["image_size"]), workers=int(data["workers"]),
            crop_scale=(float(data["min_crop_scale"]), 1.0), num_classes=int(recipe["model"]["num_classes"]),
            seed=run.seed, rank=rank, world_size=world_size, device=str(device),
            channels_last=recipe_flag(recipe["train"]["channels_last"], "train.channels_last"),
            synthetic_batches=synthetic_batches, augment=data.get("augment"),
        )  # fmt: skip


def build_loader(cfg: DataConfig, split: str, classes: list[str] | None = None):
    """The loader for ``split`` ("train" or "val") with the chosen backend: ``loader.epoch(e,
    start_batch)`` yields (images, labels) on ``cfg.device``; ``batches_per_epoch``,
    ``samples_per_epoch`` (all ranks) and ``global_batch`` describe it."""
    from zoo.imagenet_loaders.dali import DaliLoader
    from zoo.imagenet_loaders.folder import (
        DataError,
        build_folder_loader,
        check_layout,
        default_preprocessing,
    )
    from zoo.imagenet_loaders.gpu_decode import build_gpu_decode_loader
    from zoo.imagenet_loaders.synthetic import SyntheticLoader

    if cfg.backend not in BACKENDS:
        raise DataError(f"unknown data backend {cfg.backend!r}; choose one of {', '.join(BACKENDS)}")
    if cfg.backend == "synthetic":
        return SyntheticLoader(cfg, batches_per_epoch=cfg.synthetic_batches if split == "train" else 10)
    if cfg.augment not in AUGMENTATIONS:
        raise DataError(f"unknown data.augment {cfg.augment!r}; choose one of null, randaugment, autoaugment")
    if cfg.augment is not None and cfg.backend != "pytorch":
        raise DataError(
            f"data.augment {cfg.augment} is applied by --data-backend pytorch only, not {cfg.backend}"
        )
    if classes is None:
        classes = check_layout(cfg.data_dir, cfg.num_classes)
    pre = cfg.val_preprocessing
    if split == "val" and cfg.backend != "pytorch" and pre and pre != default_preprocessing(cfg.image_size):
        raise DataError(
            f"the checkpoint's preprocessing ({pre.describe()}) is applied by --data-backend pytorch only"
        )
    if cfg.backend == "pytorch":
        return build_folder_loader(cfg, split, classes)
    if cfg.backend == "gpu-decode":
        return build_gpu_decode_loader(cfg, split, classes)
    return DaliLoader(cfg, split, classes)
