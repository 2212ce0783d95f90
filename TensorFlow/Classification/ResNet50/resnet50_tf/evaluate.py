"""Top-1 / top-5 accuracy of a checkpoint on the validation TFRecords.

python -m resnet50_tf.evaluate --checkpoint results/run1 --data-dir /data/tfrecords --amp bf16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from zoo.cli import AMP_CHOICES, entry_point
from zoo.cli import parse_args as parse_shared_args
from zoo.errors import UserError

# Model-specific old spellings (zoo.cli knows the shared ones)
RENAMED = {"--out": "--results-dir (the metrics go to RESULTS_DIR/eval.json)"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="evaluate.sh", description="Top-1/top-5 of a ResNet-50 checkpoint on the validation TFRecords."
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        help="run directory (or its checkpoint/ folder), Keras-Applications .h5, or registry name (checkpoints.yaml)",
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="TFRecord folder with validation-* shards and dataset.json ($DATA_DIR)",
    )
    p.add_argument(
        "--synthetic", action="store_true", help="random images: checks the checkpoint loads and runs"
    )
    p.add_argument("--batch-size", type=int, default=128, help="per-replica batch")
    p.add_argument("--image-size", type=int, help="default: the checkpoint's, else 224")
    p.add_argument("--amp", choices=AMP_CHOICES, default="fp32", help="mixed precision of the forward pass")
    p.add_argument(
        "--results-dir",
        default=os.environ.get("RESULTS_DIR"),
        help="also write the metrics to RESULTS_DIR/eval.json ($RESULTS_DIR; default: print only)",
    )
    args = parse_shared_args(p, argv, renamed=RENAMED)
    for flag in ("batch_size", "image_size"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive integer, not {value}")
    if not args.data_dir and not args.synthetic:
        p.error("--data-dir is required unless --synthetic")
    return args


@entry_point
def main(argv=None) -> dict:
    args = parse_args(argv)
    from resnet50_tf.checkpoint import read_state, resolve_checkpoint
    from resnet50_tf.tfrecords import check_lengths, read_dataset_info

    # what needs no TensorFlow is checked before it is imported: the data's description and shard
    # lengths, the checkpoint's state
    info = None if args.synthetic else read_dataset_info(args.data_dir)
    lengths = None if info is None else check_lengths(info, ["val"])
    args.checkpoint, preprocessing = resolve_checkpoint(args.checkpoint)
    keras_h5 = str(args.checkpoint).endswith(".h5")
    if keras_h5:  # Keras Applications weights: ResNet-50 v1 with BGR "caffe" input, run as published
        run = {}
        if not os.path.isfile(args.checkpoint):
            raise UserError(f"checkpoint {args.checkpoint} not found")
    else:
        run = read_state(args.checkpoint)  # its variables are read with the weights (restore_weights)
    if info is None:  # synthetic: as many classes as the checkpoint has
        info = _synthetic_info(run.get("num_classes", 1000))
    if run and run.get("num_classes") != info.num_classes:
        raise UserError(
            f"checkpoint has {run.get('num_classes')} classes but {args.data_dir} has {info.num_classes}"
        )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.tf import make_runtime

    runtime = make_runtime("auto")
    from resnet50_tf import data
    from resnet50_tf.checkpoint import restore_weights
    from resnet50_tf.engine import evaluate
    from resnet50_tf.model import resnet50
    from resnet50_tf.step import TrainStep, set_precision
    from resnet50_tf.tfrecords import check_dataset

    if lengths is not None:
        check_dataset(info, ["val"], lengths)  # the images decoded (shards no manifest vouches for)
    image_size = args.image_size or (preprocessing.crop if preprocessing else run.get("image_size", 224))
    if preprocessing:  # a registry checkpoint is scored as it was published
        print(f"preprocessing: {preprocessing.describe()}", file=sys.stderr)
    else:
        print(
            f"preprocessing: resize {round(image_size / data.EVAL_CROP_FRACTION)}, crop {image_size}",
            file=sys.stderr,
        )
    set_precision(args.amp)
    with runtime.strategy.scope():
        variant = dict(variant="v1", input_mode="caffe") if keras_h5 else {}
        model = resnet50(info.num_classes, image_size=image_size, **variant)
        restore_weights(model, args.checkpoint)
    step = TrainStep(runtime, model, None, global_batch=1)  # its evaluation step only
    if args.synthetic:
        metrics = _evaluate_synthetic(runtime, step, info.num_classes, args.batch_size, image_size)
    else:
        batches, total = data.eval_batches(runtime, info, args.batch_size, image_size, preprocessing)
        metrics = evaluate(step, batches, total=total, chief=runtime.is_chief, source=info.data_dir)
    line = json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()})
    print(line)
    if args.results_dir:
        from zoo.io import atomic_write

        with atomic_write(Path(args.results_dir) / "eval.json") as tmp:
            tmp.write_text(line + "\n")
    return metrics


def _synthetic_info(num_classes: int):
    from resnet50_tf.tfrecords import DatasetInfo

    return DatasetInfo(
        data_dir=None, classes=[str(i) for i in range(num_classes)], train_examples=0, val_examples=0
    )


def _evaluate_synthetic(runtime, step, num_classes: int, batch_size: int, image_size: int) -> dict:
    from resnet50_tf.data import build_synthetic_dataset

    batches = runtime.strategy.distribute_datasets_from_function(
        lambda ctx: build_synthetic_dataset(batch_size, image_size, num_classes, steps=2)
    )
    top1, topk, count = sum(step.evaluate(batch).numpy() for batch in batches)
    return {"top1": 100 * top1 / count, "top5": 100 * topk / count, "samples": int(count), "synthetic": True}


if __name__ == "__main__":
    main()
