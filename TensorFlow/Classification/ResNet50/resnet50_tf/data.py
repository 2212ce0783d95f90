"""Input pipelines: tf.data over TFRecords (the default), synthetic batches, and DALI (see dali.py).

TFRecord layout (written by `python -m resnet50_tf.convert_tfrecords`): shards `train-XXXXX-of-YYYYY`
and `validation-XXXXX-of-YYYYY`, each record a tf.train.Example with `image/encoded` (JPEG bytes),
`image/class/label` (int64, 0-based), `image/class/synset`, `image/height`, `image/width`,
`image/filename`; plus `dataset.json` with the class names and the example counts.

Augmentation is stateless and seeded per (seed, epoch, element index), so an epoch is the same batch
sequence every time it is built: that is what makes resume-after-interrupt equal an unbroken run.
"""

from __future__ import annotations

import tensorflow as tf
from zoo.errors import UserError

from resnet50_tf import IMAGENET_MEAN, IMAGENET_STD

# dataset.json and the shards' names are read without TensorFlow (tfrecords.py): runs check them before
# importing it. Imported here too for the pipelines' callers.
from resnet50_tf.tfrecords import SPLITS, DatasetInfo, read_dataset_info  # noqa: F401

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}
EVAL_CROP_FRACTION = 0.875  # resize to size / 0.875 (256 for 224), then centre crop


def normalize(images):
    """uint8/float RGB on the 0..255 scale -> the float32 input the model expects."""
    images = tf.cast(images, tf.float32)
    return (images - tf.constant(IMAGENET_MEAN)) / tf.constant(IMAGENET_STD)


def _train_image(encoded, image_size: int, seed, min_area: float = 0.08):
    """Random-resized crop (scale min_area-1, ratio 3/4-4/3, decoded only inside the crop) + horizontal flip."""
    shape = tf.image.extract_jpeg_shape(encoded)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
        seed=seed,
        min_object_covered=0.1,
        aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=(min_area, 1.0),
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.stack([begin[0], begin[1], size[0], size[1]])
    image = tf.image.decode_and_crop_jpeg(encoded, crop, channels=3)
    image = tf.image.resize(image, [image_size, image_size], method="bilinear", antialias=False)
    image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
    return normalize(image)


def eval_image(encoded, image_size: int, preprocessing=None):
    """Resize the shorter side to image_size / 0.875, centre crop image_size; or, for a registry
    checkpoint, its ``preprocessing`` (zoo.checkpoints.Preprocessing: resize, interpolation, mean, std;
    its crop must be image_size)."""
    if preprocessing is not None and preprocessing.crop != image_size:
        raise UserError(f"image size {image_size} differs from the checkpoint's crop {preprocessing.crop}")
    short_side = preprocessing.resize if preprocessing else image_size / EVAL_CROP_FRACTION
    method = preprocessing.interpolation if preprocessing else "bilinear"
    image = tf.io.decode_jpeg(encoded, channels=3)
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = short_side / tf.reduce_min(shape)
    new_shape = tf.cast(tf.round(shape * scale), tf.int32)
    image = tf.image.resize(image, new_shape, method=method, antialias=True)
    top = (new_shape[0] - image_size) // 2
    left = (new_shape[1] - image_size) // 2
    image = image[top : top + image_size, left : left + image_size, :]
    image.set_shape([image_size, image_size, 3])
    if preprocessing is None:
        return normalize(image)
    mean = tf.constant([255 * m for m in preprocessing.mean], tf.float32)
    std = tf.constant([255 * s for s in preprocessing.std], tf.float32)
    return (tf.cast(image, tf.float32) - mean) / std


def _parse(record, label_offset: int):
    parsed = tf.io.parse_single_example(record, FEATURES)
    return parsed["image/encoded"], tf.cast(parsed["image/class/label"] - label_offset, tf.int32)


def _options() -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _shard(files: list[str], input_context: tf.distribute.InputContext | None):
    """Shard by file when there are enough files for every input pipeline, else by record."""
    ds = tf.data.Dataset.from_tensor_slices(files)
    n = input_context.num_input_pipelines if input_context else 1
    i = input_context.input_pipeline_id if input_context else 0
    by_file = len(files) >= n
    if by_file and n > 1:
        ds = ds.shard(n, i)
    return ds, (n, i, by_file)


def build_train_dataset(
    info: DatasetInfo,
    batch_size: int,
    image_size: int,
    *,
    epoch: int,
    seed: int,
    steps: int,
    skip_steps: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    shuffle_buffer: int = 10_000,
    min_crop_area: float = 0.08,
) -> tf.data.Dataset:
    """`steps` batches of (images, labels) for one epoch; the same sequence for the same (seed, epoch)."""
    files = info.files("train")
    ds, (n, i, by_file) = _shard(files, input_context)
    epoch_seed = seed * 100_003 + epoch
    ds = ds.shuffle(len(files), seed=epoch_seed)
    ds = ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(8, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if not by_file and n > 1:
        ds = ds.shard(n, i)
    ds = ds.shuffle(shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=False).repeat()
    offset = info.label_offset

    def parse(index, record):
        encoded, label = _parse(record, offset)
        element_seed = tf.stack([tf.constant(epoch_seed, tf.int64), index * n + i])
        return _train_image(encoded, image_size, element_seed, min_crop_area), label

    # Skip a resumed epoch's done steps as records, before decoding; indices keep their seeds.
    ds = ds.enumerate().take(steps * batch_size).skip(skip_steps * batch_size)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(_options())


def build_eval_dataset(
    info: DatasetInfo,
    batch_size: int,
    image_size: int,
    input_context: tf.distribute.InputContext | None = None,
    preprocessing=None,
) -> tf.data.Dataset:
    """Every validation image once, in order; the last batch may be short (``preprocessing``: eval_image)."""
    files = info.files("val")
    ds, (n, i, by_file) = _shard(files, input_context)
    ds = ds.flat_map(tf.data.TFRecordDataset)
    if not by_file and n > 1:
        ds = ds.shard(n, i)
    offset = info.label_offset

    def parse(record):
        encoded, label = _parse(record, offset)
        return eval_image(encoded, image_size, preprocessing), label

    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE).with_options(_options())


def build_synthetic_dataset(batch_size: int, image_size: int, num_classes: int, steps: int, seed: int = 0):
    """One fixed random batch repeated `steps` times: measures the model, not the input pipeline."""
    images = tf.random.stateless_normal([batch_size, image_size, image_size, 3], seed=[seed, 1])
    labels = tf.random.stateless_uniform([batch_size], seed=[seed, 2], maxval=num_classes, dtype=tf.int32)
    ds = tf.data.Dataset.from_tensors((images, labels)).repeat(steps)
    return ds.with_options(_options())


def _input_context(runtime, context):
    """Horovod runs one process per GPU under the default strategy: each reads its own part of the data."""
    if runtime.hvd is not None:
        return tf.distribute.InputContext(runtime.num_workers, runtime.worker_index, 1)
    return context


def train_iterator(runtime, backend: str, info, batch_size: int, image_size: int, *, num_classes: int,
                   epoch: int, seed: int, steps: int, skip_steps: int = 0, min_crop_area: float = 0.08):  # fmt: skip
    """An iterator over epoch ``epoch``'s global batches from step ``skip_steps`` on, split over the
    replicas (``backend``: tfdata, dali or synthetic); what TrainStep takes."""
    if backend == "synthetic":
        build = lambda ctx: build_synthetic_dataset(  # noqa: E731
            batch_size, image_size, num_classes, steps - skip_steps, seed=seed
        )
    elif backend == "dali":
        from resnet50_tf.dali import build_dali_train_dataset

        build = lambda ctx: build_dali_train_dataset(  # noqa: E731
            info, batch_size, image_size, epoch=epoch, seed=seed, input_context=ctx
        )
    else:
        build = lambda ctx: build_train_dataset(  # noqa: E731
            info, batch_size, image_size, epoch=epoch, seed=seed, steps=steps, skip_steps=skip_steps,
            input_context=_input_context(runtime, ctx), min_crop_area=min_crop_area,
        )  # fmt: skip
    return iter(runtime.strategy.distribute_datasets_from_function(build))


def eval_batches(runtime, info, batch_size: int, image_size: int, preprocessing=None):
    """(batches, how many): the validation split once, split over every replica and worker."""
    import math

    dataset = runtime.strategy.distribute_datasets_from_function(
        lambda ctx: build_eval_dataset(
            info, batch_size, image_size, _input_context(runtime, ctx), preprocessing=preprocessing
        )
    )
    return dataset, max(1, math.ceil(info.val_examples / (batch_size * runtime.num_replicas)))
