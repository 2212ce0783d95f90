"""Input pipelines: RecordIO through mx.io.ImageRecordIter, NVIDIA DALI's MXNet plugin, synthetic.

Every loader is an iterable over one epoch of ``(data, label, pad)``: ``data`` is a float batch
(NCHW, or NHWC from DALI when asked), ``label`` the class ids, ``pad`` how many trailing samples of
the last batch are filler to be ignored. A loader is built per epoch with a seed derived from the
epoch, so the order and the augmentation of epoch ``e`` do not depend on what ran before it: this is
what makes a resumed run equal an unbroken one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mxnet as mx
import numpy as np
from zoo.errors import UserError, one_line

from resnet50_mx import BACKENDS  # noqa: F401 (data.BACKENDS, as before)

from .records import record_paths

# ImageNet statistics of RGB pixels in [0, 255].
MEAN_RGB = (123.68, 116.779, 103.939)
STD_RGB = (58.393, 57.12, 57.375)


@dataclass
class DataSpec:
    """Where the data is and how it is cut into batches for one process."""

    backend: str
    data_dir: str | None
    batch_size: int  # per process (all devices of the process together)
    image_size: int
    num_classes: int
    num_parts: int = 1  # number of processes reading disjoint shards
    part_index: int = 0
    threads: int = 4
    synthetic_batches: int = 20  # batches per "epoch" of synthetic data
    dtype: str = "float32"
    layout: str = "NCHW"  # layout of the batches handed to the model
    random_resized_crop: bool = True  # training augmentation: random-resized crop (else the whole image)
    min_random_area: float = 0.08  # random-resized-crop: smallest crop, as a fraction of the image
    mirror: bool = True  # training augmentation: random horizontal flip
    # validation resize/interpolation/mean/std of a registry checkpoint (zoo.checkpoints.Preprocessing;
    # its crop is image_size); None: resize image_size / 0.875, bilinear, MEAN_RGB/STD_RGB
    val_preprocessing: object | None = None


def count_records(idx_path: Path) -> int:
    with open(idx_path) as f:
        return sum(1 for line in f if line.strip())


def val_resize(image_size: int) -> int:
    """Shorter side before the centre crop (256 for 224: the 0.875 crop ratio)."""
    return int(round(image_size / 0.875))


def val_transform(spec: DataSpec) -> dict:
    """{resize, interpolation, mean, std (RGB, 0..255)} of validation: the spec's preprocessing or ours."""
    pre = spec.val_preprocessing
    if pre is None:
        return dict(resize=val_resize(spec.image_size), interpolation="bilinear", mean=MEAN_RGB, std=STD_RGB)
    if pre.crop != spec.image_size:
        raise UserError(f"image size {spec.image_size} differs from the checkpoint's crop {pre.crop}")
    return dict(
        resize=pre.resize,
        interpolation=pre.interpolation,
        mean=tuple(255 * m for m in pre.mean),
        std=tuple(255 * s for s in pre.std),
    )


class RecordLoader:
    """One epoch of mx.io.ImageRecordIter over ``train.rec`` or ``val.rec``."""

    def __init__(self, spec: DataSpec, *, train: bool, seed: int):
        rec, idx = record_paths(spec.data_dir, "train" if train else "val")
        self.num_samples = count_records(idx)
        # Validation reads the whole set in every process: ImageRecordIter reports no pad, so the
        # filler of the last batch is counted here, which needs the unsharded sample count.
        num_parts, part_index = (spec.num_parts, spec.part_index) if train else (1, 0)
        per_step = spec.batch_size * num_parts
        # Training drops the last partial step, so that every worker runs the same number of steps.
        self.batches = max(1, self.num_samples // per_step) if train else -(-self.num_samples // per_step)
        self.batch_size, self.train = spec.batch_size, train
        common = dict(
            path_imgrec=str(rec),
            path_imgidx=str(idx),
            data_shape=(3, spec.image_size, spec.image_size),
            batch_size=spec.batch_size,
            num_parts=num_parts,
            part_index=part_index,
            preprocess_threads=spec.threads,
            mean_r=MEAN_RGB[0],
            mean_g=MEAN_RGB[1],
            mean_b=MEAN_RGB[2],
            std_r=STD_RGB[0],
            std_g=STD_RGB[1],
            std_b=STD_RGB[2],
            dtype=spec.dtype,
            verbose=False,
        )
        if train:
            self.iter = mx.io.ImageRecordIter(
                **common,
                shuffle=True,
                seed=seed,
                seed_aug=seed,
                round_batch=True,
                rand_mirror=spec.mirror,
                **(
                    dict(
                        random_resized_crop=True,
                        min_random_area=spec.min_random_area,
                        max_random_area=1.0,
                        min_aspect_ratio=3 / 4,
                        max_aspect_ratio=4 / 3,
                    )
                    if spec.random_resized_crop
                    else dict(resize=spec.image_size)
                ),
            )
        else:
            val = val_transform(spec)
            common.update(zip(("mean_r", "mean_g", "mean_b"), val["mean"], strict=True))
            common.update(zip(("std_r", "std_g", "std_b"), val["std"], strict=True))
            self.iter = mx.io.ImageRecordIter(
                **common,
                resize=val["resize"],
                inter_method={"nearest": 0, "bilinear": 1, "bicubic": 2}[val["interpolation"]],
                rand_crop=False,
                round_batch=False,
            )
        self.to_nhwc = spec.layout == "NHWC"

    def __iter__(self):
        seen = 0
        for batch in self.iter:
            data = batch.data[0]
            if self.to_nhwc:
                data = mx.nd.transpose(data, axes=(0, 2, 3, 1))
            pad = 0 if self.train else max(0, seen + self.batch_size - self.num_samples)
            seen += self.batch_size
            yield data, batch.label[0], pad


class SyntheticLoader:
    """Random images and labels made once, on the first device; no disk, no decode."""

    def __init__(self, spec: DataSpec, *, seed: int, ctx: mx.Context):
        rng = np.random.RandomState(seed)
        shape = (spec.batch_size, 3, spec.image_size, spec.image_size)
        if spec.layout == "NHWC":
            shape = (spec.batch_size, spec.image_size, spec.image_size, 3)
        self.data = mx.nd.array(rng.standard_normal(shape), ctx=ctx, dtype=spec.dtype)
        self.label = mx.nd.array(rng.randint(0, spec.num_classes, spec.batch_size), ctx=ctx)
        self.batches = spec.synthetic_batches
        self.num_samples = self.batches * spec.batch_size * spec.num_parts

    def __iter__(self):
        for _ in range(self.batches):
            yield self.data, self.label, 0


class DaliLoader:
    """DALI pipeline over the same RecordIO files: decode on the GPU (``mixed``) or on the CPU."""

    def __init__(self, spec: DataSpec, *, train: bool, seed: int, device_id: int, gpu_decode: bool):
        try:
            from nvidia.dali import fn, pipeline_def, types
            from nvidia.dali.plugin.mxnet import DALIClassificationIterator, LastBatchPolicy
        except ImportError as e:
            raise UserError(
                f"--data-backend dali-* needs NVIDIA DALI's MXNet plugin (nvidia-dali-cuda*), not importable here: {one_line(e)}"
            ) from None
        rec, idx = record_paths(spec.data_dir, "train" if train else "val")
        self.num_samples = count_records(idx)
        per_step = spec.batch_size * spec.num_parts
        self.batches = max(1, self.num_samples // per_step) if train else -(-self.num_samples // per_step)
        decoder_device = "mixed" if gpu_decode else "cpu"
        size = spec.image_size

        @pipeline_def(batch_size=spec.batch_size, num_threads=spec.threads, device_id=device_id, seed=seed)
        def pipeline():
            jpegs, labels = fn.readers.mxnet(
                path=[str(rec)],
                index_path=[str(idx)],
                shard_id=spec.part_index,
                num_shards=spec.num_parts,
                random_shuffle=train,
                pad_last_batch=not train,
                name="reader",
            )
            if train:
                area = [spec.min_random_area if spec.random_resized_crop else 1.0, 1.0]
                ratio = [3 / 4, 4 / 3] if spec.random_resized_crop else [1.0, 1.0]
                images = fn.decoders.image_random_crop(
                    jpegs,
                    device=decoder_device,
                    output_type=types.RGB,
                    random_area=area,
                    random_aspect_ratio=ratio,
                )
                images = fn.resize(images, resize_x=size, resize_y=size)
                mirror = fn.random.coin_flip(probability=0.5 if spec.mirror else 0.0)
            else:
                val = val_transform(spec)
                interpolation = {"nearest": types.INTERP_NN, "bilinear": types.INTERP_LINEAR}.get(
                    val["interpolation"], types.INTERP_CUBIC
                )
                images = fn.decoders.image(jpegs, device=decoder_device, output_type=types.RGB)
                images = fn.resize(images, resize_shorter=val["resize"], interp_type=interpolation)
                mirror = False
            images = fn.crop_mirror_normalize(
                images.gpu() if not gpu_decode else images,
                dtype=types.FLOAT16 if spec.dtype == "float16" else types.FLOAT,
                output_layout="HWC" if spec.layout == "NHWC" else "CHW",
                crop=(size, size),
                mean=list(MEAN_RGB if train else val["mean"]),
                std=list(STD_RGB if train else val["std"]),
                mirror=mirror,
            )
            return images, labels.gpu()

        pipe = pipeline()
        pipe.build()
        self.iter = DALIClassificationIterator(
            pipe,
            reader_name="reader",
            last_batch_policy=LastBatchPolicy.FILL if train else LastBatchPolicy.PARTIAL,
        )

    def __iter__(self):  # one pass: a loader is built per epoch
        for batch in self.iter:
            yield batch[0].data[0], batch[0].label[0], batch[0].pad or 0


def build_loader(spec: DataSpec, *, train: bool, epoch: int, seed: int, ctx: mx.Context):
    """The loader of one epoch; its seed depends only on (seed, epoch, shard)."""
    if spec.backend not in BACKENDS:
        raise UserError(f"unknown data backend {spec.backend!r} (choose from {', '.join(BACKENDS)})")
    epoch_seed = seed + 1000 * epoch + spec.part_index
    if spec.backend == "synthetic":
        return SyntheticLoader(spec, seed=epoch_seed, ctx=ctx)
    if spec.data_dir is None:
        raise UserError(f"--data-backend {spec.backend} needs --data-dir (or use --data-backend synthetic)")
    if spec.backend == "recordio":
        return RecordLoader(spec, train=train, seed=epoch_seed)
    device_id = ctx.device_id if ctx.device_type == "gpu" else 0
    return DaliLoader(
        spec, train=train, seed=epoch_seed, device_id=device_id, gpu_decode=spec.backend == "dali-gpu"
    )
