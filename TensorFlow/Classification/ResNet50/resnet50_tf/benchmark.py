"""Training and inference throughput (images/s) and latency percentiles on synthetic data; JSON report.

    python -m resnet50_tf.benchmark --mode train --amp bf16 --batch-size 256 --xla --output bench.json

Synthetic batches already in device memory measure the model and the framework, not the input
pipeline. Training runs the same step as train.py (tf.distribute over the visible GPUs, the recipe's
optimizer); inference runs model(images, training=False) in a tf.function. Both are timed by
zoo.bench.measure with per-call latency. The report follows zoo.bench (schema zoo.bench/v1): one
result per (mode, batch).
"""

from __future__ import annotations

import argparse
import os
import platform

from zoo.cli import add_run_args, entry_point
from zoo.cli import parse_args as parse_shared_args

from resnet50_tf import DEFAULT_RECIPE

# Model-specific old spellings (zoo.cli knows the shared ones)
RENAMED = {"--out": "--output"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmark.sh",
        description="ResNet-50 v1.5 training/inference throughput and latency (JSON report).",
    )
    add_run_args(p, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    p.add_argument("--mode", choices=["train", "inference", "both"], default="both")
    p.add_argument("--batch-size", type=int, nargs="+", default=[256], help="per-replica batch size(s)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--xla", action="store_true", help="jit_compile the step")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--distribution", default="auto")
    p.add_argument("--output", help="write the zoo.bench JSON report here")
    p.add_argument(
        "--synthetic", action="store_true", help="accepted for uniformity: the benchmark is always synthetic"
    )
    args = parse_shared_args(p, argv, renamed=RENAMED)
    if min(args.batch_size) < 1 or args.iters < 1 or args.warmup < 0:
        p.error("batch sizes and --iters must be >= 1, --warmup >= 0")
    return args


@entry_point
def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.tf import make_runtime

    runtime = make_runtime(args.distribution)
    import tensorflow as tf
    from zoo.bench import write_report
    from zoo.cli import recipe_from_args
    from zoo.recipe import run_config

    from resnet50_tf.model import resnet50
    from resnet50_tf.optim import build_optimizer
    from resnet50_tf.step import set_precision

    # the recipe's optimizer and precision (--amp); --batch-size lists the batches to measure
    recipe = recipe_from_args(argparse.Namespace(**{**vars(args), "batch_size": None}))
    amp = run_config(recipe).precision
    set_precision(amp)
    gpus = tf.config.list_physical_devices("GPU")
    device = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if gpus
        else platform.processor() or "CPU"
    )
    results = []
    modes = ["train", "inference"] if args.mode == "both" else [args.mode]
    for batch in args.batch_size:
        global_batch = batch * runtime.num_replicas
        with runtime.strategy.scope():
            model = resnet50(args.num_classes, image_size=args.image_size)
            optimizer = build_optimizer(recipe, 1000, global_batch, amp)
            optimizer.build(model.trainable_variables)
        if "train" in modes:
            summary = _bench_train(runtime, args, recipe, model, optimizer, batch, global_batch)
            results.append({"mode": "train", "batch": batch, "global_batch": global_batch, **summary})
            print(f"train      batch {global_batch:5d}: {summary['throughput']:9.1f} img/s")
        if "inference" in modes:
            summary = _bench_inference(args, model, batch)
            results.append({"mode": "inference", "batch": batch, **summary})
            lat = summary["latency_ms"]
            print(
                f"inference  batch {batch:5d}: {summary['throughput']:9.1f} img/s  "
                f"latency p50 {lat['p50']:.2f} ms p99 {lat['p99']:.2f} ms"
            )
    if args.output:
        write_report(
            args.output,
            results,
            device=device,
            replicas=runtime.num_replicas,
            amp=amp,
            xla=args.xla,
            image_size=args.image_size,
            framework=f"tensorflow {tf.__version__}",
        )
        print(f"wrote {args.output}")
    return results


def _bench_train(runtime, args, recipe, model, optimizer, batch: int, global_batch: int) -> dict:
    from zoo.bench import measure

    from resnet50_tf.data import build_synthetic_dataset
    from resnet50_tf.step import TrainStep

    train_step = TrainStep(
        runtime, model, optimizer, global_batch, float(recipe["label_smoothing"]), args.xla
    )
    steps = args.warmup + args.iters
    data = runtime.strategy.distribute_datasets_from_function(
        lambda ctx: build_synthetic_dataset(batch, args.image_size, args.num_classes, steps).cache()
    )
    iterator = iter(data)
    return measure(
        lambda: float(train_step(iterator)[0]),  # float() waits for the step
        items_per_call=global_batch,
        warmup=args.warmup,
        iters=args.iters,
        per_call=True,
    )


def _bench_inference(args, model, batch: int) -> dict:
    import tensorflow as tf
    from zoo.bench import measure

    images = tf.random.stateless_normal([batch, args.image_size, args.image_size, 3], seed=[0, 1])

    @tf.function(jit_compile=args.xla)
    def infer(x):
        return tf.argmax(model(x, training=False), -1)

    return measure(
        lambda: infer(images).numpy(),  # .numpy() waits for the result
        items_per_call=batch,
        warmup=args.warmup,
        iters=args.iters,
        per_call=True,
    )


if __name__ == "__main__":
    main()
