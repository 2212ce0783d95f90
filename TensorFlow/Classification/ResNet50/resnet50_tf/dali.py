"""NVIDIA DALI input (GPU JPEG decode and augmentation) from the same TFRecords, as a tf.data.Dataset.

Needs `nvidia-dali-cuda120` (or -cuda110) and `nvidia-dali-tf-plugin-cuda120` (NVIDIA's TensorFlow
containers ship them), plus DALI index files next to the shards: `<shard>.idx`, made once with
DALI's `tfrecord2idx <shard> <shard>.idx`. Training only; evaluation uses tf.data.
"""

from __future__ import annotations

from pathlib import Path

from zoo.errors import UserError

from resnet50_tf import IMAGENET_MEAN, IMAGENET_STD


def _import_dali():
    try:
        import nvidia.dali.fn as fn
        import nvidia.dali.plugin.tf as dali_tf
        import nvidia.dali.tfrecord as tfrec
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def
    except ImportError as e:
        raise UserError(
            f"--data-backend dali needs NVIDIA DALI and its TensorFlow plugin ({e}); use --data-backend tfdata"
        ) from None
    return fn, dali_tf, tfrec, types, pipeline_def


def build_dali_train_dataset(
    info, batch_size: int, image_size: int, *, epoch: int, seed: int, input_context=None
):
    import tensorflow as tf

    fn, dali_tf, tfrec, types, pipeline_def = _import_dali()
    files = info.files("train")
    indexes = [f + ".idx" for f in files]
    missing = [i for i in indexes if not Path(i).is_file()]
    if missing:
        raise UserError(f"DALI needs index files, e.g. {missing[0]}: run tfrecord2idx on each shard")
    shards = input_context.num_input_pipelines if input_context else 1
    shard_id = input_context.input_pipeline_id if input_context else 0
    device_id = 0  # each replica's pipeline runs on the GPU tf.distribute places it on
    offset = info.label_offset

    @pipeline_def(batch_size=batch_size, num_threads=4, device_id=device_id, seed=seed * 100_003 + epoch)
    def pipeline():
        inputs = fn.readers.tfrecord(
            path=files,
            index_path=indexes,
            features={
                "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            },
            shard_id=shard_id,
            num_shards=shards,
            random_shuffle=True,
            name="Reader",
        )
        images = fn.decoders.image_random_crop(
            inputs["image/encoded"], device="mixed", output_type=types.RGB, random_area=[0.08, 1.0]
        )
        images = fn.resize(images, resize_x=image_size, resize_y=image_size)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="HWC",
            mean=list(IMAGENET_MEAN),
            std=list(IMAGENET_STD),
            mirror=fn.random.coin_flip(),
        )
        labels = fn.cast(inputs["image/class/label"] - offset, dtype=types.INT32)
        return images, fn.reshape(labels, shape=[])

    with tf.device("/gpu:0"):
        return dali_tf.DALIDataset(
            pipeline=pipeline(),
            batch_size=batch_size,
            output_shapes=((batch_size, image_size, image_size, 3), (batch_size,)),
            output_dtypes=(tf.float32, tf.int32),
            device_id=device_id,
        )
